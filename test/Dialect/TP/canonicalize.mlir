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
