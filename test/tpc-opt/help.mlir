// Every tp pass and pipeline is listed by --help.
// RUN: tpc-opt --help | FileCheck %s
// CHECK-DAG: --tp-autodiff
// CHECK-DAG: --tp-lower-collectives
// CHECK-DAG: --tp-partition
// CHECK-DAG: --tp-pipeline
// CHECK-DAG: --tp-plan-memory
// CHECK-DAG: --tp-print-sharding-rules
// CHECK-DAG: --tp-report-communication
// Typed options list their values; tp-pipeline and tp-shard spell
// seq-parallel alike.
// RUN: tpc-opt --help | FileCheck %s --check-prefix=OPTIONS
// OPTIONS: --tp-autodiff
// OPTIONS: --remat=<value>
// OPTIONS-NEXT: =none
// OPTIONS-NEXT: =layer
// OPTIONS: --tp-shard
// OPTIONS: --grid=<shape>
// OPTIONS: --mode=<value>
// OPTIONS-NEXT: =none
// OPTIONS-NEXT: =1d
// OPTIONS: --seq-parallel
// OPTIONS: --tp-pipeline
// OPTIONS: --grid=<shape>
// OPTIONS: --mode=<value>
// OPTIONS: --seq-parallel
