// RUN: tpc-opt %s -split-input-file -canonicalize | FileCheck %s

tp.grid @g [2, 2]

// A redistribute to the layout the value already has folds away.
// CHECK-LABEL: func.func @identity
// CHECK-SAME: (%[[X:.*]]: tensor
// CHECK-NOT: tp.redistribute
// CHECK: return %[[X]]
func.func @identity(%x: tensor<8x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[0], []]>> -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
}

// Only the final layout of a chain matters.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:.*]]: tensor
// CHECK-NEXT: %[[R:.*]] = tp.redistribute %[[X]] : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], [0]]>>
// CHECK-NEXT: return %[[R]]
func.func @chain(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>) -> tensor<8x16xf32, #tp.dist<@g, [[1], [0]]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
  %1 = tp.redistribute %0 : tensor<8x16xf32, #tp.dist<@g, [[0], []]>> -> tensor<8x16xf32, #tp.dist<@g, [[1], [0]]>>
  return %1 : tensor<8x16xf32, #tp.dist<@g, [[1], [0]]>>
}

// A chain that returns to its starting layout disappears entirely.
// CHECK-LABEL: func.func @round_trip
// CHECK-SAME: (%[[X:.*]]: tensor
// CHECK-NOT: tp.redistribute
// CHECK: return %[[X]]
func.func @round_trip(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tp.redistribute %x : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[0], [1]]>>
  %1 = tp.redistribute %0 : tensor<8x16xf32, #tp.dist<@g, [[0], [1]]>> -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

// Attention's 1/sqrt(d) scale folds into the score matmul's alpha.
// CHECK-LABEL: func.func @scale_into_matmul
// CHECK-NEXT: %[[M:.*]] = tp.matmul %arg0, %arg1 {alpha = 1.250000e-01 : f64, transpose_rhs}
// CHECK-NEXT: return %[[M]]
func.func @scale_into_matmul(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>) -> tensor<2x8x8xf32> {
  %0 = tp.matmul %q, %k {transpose_rhs} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %1 = tp.scale %0, 0.25 : tensor<2x8x8xf32>
  %2 = tp.scale %1, 0.5 : tensor<2x8x8xf32>
  return %2 : tensor<2x8x8xf32>
}

// A product with other users keeps its value: only the scales compose.
// CHECK-LABEL: func.func @shared_product
// CHECK-NEXT: %[[M:.*]] = tp.matmul %arg0, %arg1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: %[[S:.*]] = tp.scale %[[M]], 6.000000e+00
// CHECK-NEXT: tp.add %[[M]], %[[S]]
func.func @shared_product(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = tp.matmul %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = tp.scale %0, 2.0 : tensor<4x4xf32>
  %2 = tp.scale %1, 3.0 : tensor<4x4xf32>
  %3 = tp.add %0, %2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %3 : tensor<4x4xf32>
}

// -----

tp.grid @g [2, 2]

// A local slice of an all-reduce over the same axes is one reduce-scatter.
// CHECK-LABEL: func.func @all_reduce_then_split
// CHECK-NEXT: %[[R:.*]] = tp.reduce_scatter %arg0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], [0]]>>
// CHECK-NEXT: return %[[R]]
func.func @all_reduce_then_split(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], [0]]>> {
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32>
  %1 = tp.local_split %0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
  return %1 : tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
}

// Another user needs the whole sum: nothing fuses.
// CHECK-LABEL: func.func @all_reduce_kept
// CHECK-NEXT: %[[S:.*]] = tp.all_reduce %arg0
// CHECK-NEXT: %[[L:.*]] = tp.local_split %[[S]]
// CHECK-NEXT: return %[[S]], %[[L]]
func.func @all_reduce_kept(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>) -> (tensor<8x16xf32>, tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>) {
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32>
  %1 = tp.local_split %0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
}

// The slice is over another axis than the sum: nothing fuses.
// CHECK-LABEL: func.func @other_axis
// CHECK-NEXT: %[[S:.*]] = tp.all_reduce %arg0
// CHECK-NEXT: %[[L:.*]] = tp.local_split %[[S]] over @g {dim = 1 : i64, grid_axes = array<i64: 1>}
// CHECK-NEXT: return %[[L]]
func.func @other_axis(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], [1]]>> {
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32>
  %1 = tp.local_split %0 over @g {dim = 1 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[], [1]]>>
  return %1 : tensor<8x16xf32, #tp.dist<@g, [[], [1]]>>
}
