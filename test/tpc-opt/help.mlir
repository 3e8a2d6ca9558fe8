// Every tp pass is listed by --help.
// RUN: tpc-opt --help | FileCheck %s
// CHECK: --tp-print-sharding-rules
