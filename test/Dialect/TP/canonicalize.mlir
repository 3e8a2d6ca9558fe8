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

// -----

// A conversion of an accumulating op's only result is the op's own result
// type: the weight gradient's product accumulates into f32.
// CHECK-LABEL: func.func @convert_folds_into_product
// CHECK-NEXT: %[[P:.*]] = tp.matmul %arg0, %arg1 {transpose_lhs} : (tensor<8x16xbf16>, tensor<8x32xbf16>) -> tensor<16x32xf32>
// CHECK-NEXT: return %[[P]]
func.func @convert_folds_into_product(%x: tensor<8x16xbf16>, %dy: tensor<8x32xbf16>) -> tensor<16x32xf32> {
  %0 = tp.matmul %x, %dy {transpose_lhs} : (tensor<8x16xbf16>, tensor<8x32xbf16>) -> tensor<16x32xbf16>
  %1 = tp.convert %0 : tensor<16x32xbf16> -> tensor<16x32xf32>
  return %1 : tensor<16x32xf32>
}

// Through a reshape (a bias gradient's sum reshaped to the bias).
// CHECK-LABEL: func.func @convert_moves_before_view
// CHECK-NEXT: %[[S:.*]] = tp.reduce_sum %arg0 {dims = array<i64: 0>} : (tensor<8x32xbf16>) -> tensor<32xf32>
// CHECK-NEXT: %[[R:.*]] = tp.reshape %[[S]] : (tensor<32xf32>) -> tensor<1x32xf32>
// CHECK-NEXT: return %[[R]]
func.func @convert_moves_before_view(%dy: tensor<8x32xbf16>) -> tensor<1x32xf32> {
  %0 = tp.reduce_sum %dy {dims = array<i64: 0>} : (tensor<8x32xbf16>) -> tensor<32xbf16>
  %1 = tp.reshape %0 : (tensor<32xbf16>) -> tensor<1x32xbf16>
  %2 = tp.convert %1 : tensor<1x32xbf16> -> tensor<1x32xf32>
  return %2 : tensor<1x32xf32>
}

// An op that rounds each element (gelu) keeps its rounding: no fold. Nor
// does a product whose result has another use.
// CHECK-LABEL: func.func @convert_kept
// CHECK: tp.gelu
// CHECK-NEXT: tp.convert
// CHECK: tp.matmul
// CHECK-NEXT: tp.convert
func.func @convert_kept(%x: tensor<8x16xbf16>, %w: tensor<16x16xbf16>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xbf16>) {
  %0 = tp.gelu %x : tensor<8x16xbf16>
  %1 = tp.convert %0 : tensor<8x16xbf16> -> tensor<8x16xf32>
  %2 = tp.matmul %x, %w : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> tensor<8x16xbf16>
  %3 = tp.convert %2 : tensor<8x16xbf16> -> tensor<8x16xf32>
  return %1, %3, %2 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xbf16>
}

// Widening then narrowing back is exact; the other way round is not. A
// conversion to the same type and of a constant fold away.
// CHECK-LABEL: func.func @convert_pairs
// CHECK-NEXT: %[[N:.*]] = tp.convert %arg1 : tensor<4xf32> -> tensor<4xbf16>
// CHECK-NEXT: %[[W:.*]] = tp.convert %[[N]] : tensor<4xbf16> -> tensor<4xf32>
// CHECK-NEXT: %[[C:.*]] = tp.constant 2.500000e-01 : tensor<4xbf16>
// CHECK-NEXT: return %arg0, %[[W]], %arg1, %[[C]]
func.func @convert_pairs(%a: tensor<4xbf16>, %b: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>) {
  %0 = tp.convert %a : tensor<4xbf16> -> tensor<4xf32>
  %1 = tp.convert %0 : tensor<4xf32> -> tensor<4xbf16>
  %2 = tp.convert %b : tensor<4xf32> -> tensor<4xbf16>
  %3 = tp.convert %2 : tensor<4xbf16> -> tensor<4xf32>
  %4 = tp.convert %b : tensor<4xf32> -> tensor<4xf32>
  %5 = tp.constant 0.25 : tensor<4xf32>
  %6 = tp.convert %5 : tensor<4xf32> -> tensor<4xbf16>
  return %1, %3, %4, %6 : tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>
}

// A GELU linear's preactivation that nothing reads is dropped, its rebalance
// dims with it.
// CHECK-LABEL: func.func @linear_unused_preactivation
// CHECK-NEXT: %[[Y:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu, tp.layer = 1 : i64, tp.rebalance_dims = {{\[\[}}unit, @p]]} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[K:.*]], %[[P:.*]] = tp.linear %arg0, %arg1, %arg2 {gelu}
// CHECK-NEXT: return %[[Y]], %[[K]], %[[P]]
func.func @linear_unused_preactivation(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %0:2 = tp.linear %x, %w, %b {gelu, tp.layer = 1 : i64, tp.rebalance_dims = [[unit, @p], [unit, @p]]} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  %1:2 = tp.linear %x, %w, %b {gelu} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  return %0#0, %1#0, %1#1 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}
