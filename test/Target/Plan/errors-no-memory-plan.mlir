// The emitter needs the per-rank program (tp-partition) with planned memory
// (tp-plan-memory); without them it says which pass is missing. A module
// without layouts is already the per-rank program.
// RUN: split-file %s %t
// RUN: not tpc-opt %t/global.mlir -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=PARTITION
// RUN: test ! -e %t.tpplan
// PARTITION: error: plan: run tp-partition before emitting a plan
// RUN: not tpc-opt %t/local.mlir -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=MEMORY
// RUN: test ! -e %t.tpplan
// RUN: not tpc-opt %t/global.mlir --tp-partition -o %t.tpplan 2>&1 | FileCheck %s --check-prefix=MEMORY
// RUN: test ! -e %t.tpplan
// MEMORY: error: plan: run tp-plan-memory before emitting a plan: no function has planned memory (tp-explain, and tp-pipeline with compile-choice=false, leave the module uncompiled: write .mlir)
// MEMORY-NOT: func.func

//--- global.mlir
tp.grid @g [2]
func.func @forward(%x: tensor<4xf32, #tp.dist<@g, [[0]]>> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32, #tp.dist<@g, [[0]]>> {
  %0 = tp.gelu %x : tensor<4xf32, #tp.dist<@g, [[0]]>>
  return %0 : tensor<4xf32, #tp.dist<@g, [[0]]>>
}

//--- local.mlir
func.func @forward(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
