// Every tp pass and pipeline is listed by --help.
// RUN: tpc-opt --help | FileCheck %s
// CHECK-DAG: --tp-autodiff
// CHECK-DAG: --tp-lower-collectives
// CHECK-DAG: --tp-partition
// CHECK-DAG: --tp-pipeline
// CHECK-DAG: --tp-plan-memory
// CHECK-DAG: --tp-print-sharding-rules
// CHECK-DAG: --tp-report-communication
