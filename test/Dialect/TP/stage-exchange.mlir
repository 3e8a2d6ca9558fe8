// Collectives over the stage axis of a module pipelined into several stages
// write the stage-exchange resource: a stage program makes them even where
// it does not use the result (its neighbours do), so the canonicalizer keeps
// them; over other axes, and without stages, an unused collective goes.
// RUN: tpc-opt %s -split-input-file -canonicalize | FileCheck %s

// CHECK-LABEL: func.func @stage
// CHECK: tp.all_reduce %{{.*}} over @tp {grid_axes = array<i64: 0>}
// CHECK-NOT: tp.all_reduce
// CHECK: return
module attributes {tp.pipeline = {chunks = 1 : i64, layers = array<i64: 1, 1>, microbatches = 1 : i64, schedule = "gpipe", stages = 2 : i64}} {
  tp.grid @tp [2, 2]
  func.func @stage(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = tp.all_reduce %x over @tp {grid_axes = array<i64: 0>} : tensor<4xf32> -> tensor<4xf32>
    %1 = tp.all_reduce %x over @tp {grid_axes = array<i64: 1>} : tensor<4xf32> -> tensor<4xf32>
    return %x : tensor<4xf32>
  }
}

// -----

// CHECK-LABEL: func.func @one_stage
// CHECK-NOT: tp.all_reduce
// CHECK: return
module attributes {tp.pipeline = {chunks = 1 : i64, layers = array<i64: 2>, microbatches = 2 : i64, schedule = "1f1b", stages = 1 : i64}} {
  tp.grid @tp [1, 2]
  func.func @one_stage(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = tp.all_reduce %x over @tp {grid_axes = array<i64: 0>} : tensor<4xf32> -> tensor<4xf32>
    return %x : tensor<4xf32>
  }
}
