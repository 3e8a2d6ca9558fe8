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
// The hundreds of options the LLVM libraries register (AMDGPU, ARM, PGO)
// are not listed: MLIR's driver options and the passes are.
// RUN: tpc-opt --help | FileCheck %s --check-prefix=NO-LLVM --implicit-check-not=amdgpu --implicit-check-not=aarch64
// NO-LLVM: --mlir-timing
// NO-LLVM: -o <filename>
// RUN: tpc-import --help | FileCheck %s --check-prefix=IMPORT --implicit-check-not=amdgpu --implicit-check-not=mlir-
// IMPORT: tpc-import options:
// IMPORT: --batch=<long>
// IMPORT: --kv-cache=<long>
// IMPORT: -o <filename>
// IMPORT: --seq=<long>
