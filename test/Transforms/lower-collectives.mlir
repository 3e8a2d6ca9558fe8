// RUN: tpc-opt %s -split-input-file -verify-diagnostics --tp-lower-collectives | FileCheck %s

tp.grid @g [2, 4]

// A pending partial sum becomes replicated: one all-reduce.
// CHECK-LABEL: func.func @all_reduce
// CHECK-NEXT: %[[R:.*]] = tp.all_reduce %arg0 over @g {grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [1]>> -> tensor<8x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @all_reduce(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>>) -> tensor<8x16xf32> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// A partial sum the target also splits on the same axis: all-reduce + slice
// fuse into a reduce-scatter (sequence parallelism's pattern).
// CHECK-LABEL: func.func @reduce_scatter
// CHECK-NEXT: %[[R:.*]] = tp.reduce_scatter %arg0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], []]>>
// CHECK-NEXT: return %[[R]]
func.func @reduce_scatter(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>>) -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
}

// A target splitting first on an axis the value is replicated over, then
// on the partial one (ZeRO-1's layout of a vector gradient): the free slice
// first, then a reduce-scatter of the slice, not an all-reduce of it all.
// CHECK-LABEL: func.func @slice_then_reduce_scatter
// CHECK-NEXT: %[[S:.*]] = tp.local_split %arg0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} {{.*}} -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], []], partial = [0]>>
// CHECK-NEXT: %[[R:.*]] = tp.reduce_scatter %[[S]] over @g {dim = 0 : i64, grid_axes = array<i64: 0>} {{.*}} -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1, 0], []]>>
// CHECK-NEXT: return %[[R]]
func.func @slice_then_reduce_scatter(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>) -> tensor<8x16xf32, #tp.dist<@g, [[1, 0], []]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, [[1, 0], []]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[1, 0], []]>>
}

// Over two axes at once, with another dimension already split.
// CHECK-LABEL: func.func @reduce_scatter_two_axes
// CHECK-NEXT: tp.reduce_scatter %arg0 over @g {dim = 1 : i64, grid_axes = array<i64: 0, 1>}
// CHECK-NEXT: return
func.func @reduce_scatter_two_axes(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0, 1]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0, 1]>> -> tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>>
}

// A split the target does not want is gathered.
// CHECK-LABEL: func.func @all_gather
// CHECK-NEXT: tp.all_gather %arg0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}0, 1], []]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}0], []]>>
// CHECK-NEXT: return
func.func @all_gather(%x: tensor<8x16xf32, #tp.dist<@g, [[0, 1], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[0, 1], []]>> -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
}

// A split that moves to another dimension is one all-to-all.
// CHECK-LABEL: func.func @all_to_all
// CHECK-NEXT: tp.all_to_all %arg0 over @g {grid_axes = array<i64: 1>, source_dim = 0 : i64, target_dim = 1 : i64} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], []]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], [1]]>>
// CHECK-NEXT: return
func.func @all_to_all(%x: tensor<8x16xf32, #tp.dist<@g, [[1], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], [1]]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[1], []]>> -> tensor<8x16xf32, #tp.dist<@g, [[], [1]]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[], [1]]>>
}

// Splitting a replicated value needs no communication.
// CHECK-LABEL: func.func @local_split
// CHECK-NEXT: tp.local_split %arg0 over @g {dim = 1 : i64, grid_axes = array<i64: 0, 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], [0, 1]]>>
// CHECK-NEXT: return
func.func @local_split(%x: tensor<8x16xf32>) -> tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[], [0, 1]]>>
}

// An explicit all-reduce whose only use slices it locally on the same axes
// is a reduce-scatter; with another use it stays.
// CHECK-LABEL: func.func @all_reduce_then_slice
// CHECK-NEXT: %[[R:.*]] = tp.reduce_scatter %arg0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], []], partial = [1]>> -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], []]>>
// CHECK-NEXT: return %[[R]]
func.func @all_reduce_then_slice(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>>) -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>> {
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>> -> tensor<8x16xf32>
  %1 = tp.local_split %0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
  return %1 : tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
}

// CHECK-LABEL: func.func @all_reduce_used_twice
// CHECK-NEXT: tp.all_reduce
// CHECK-NEXT: tp.local_split
func.func @all_reduce_used_twice(%x: tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>>) -> (tensor<8x16xf32>, tensor<8x16xf32, #tp.dist<@g, [[1], []]>>) {
  %0 = tp.all_reduce %x over @g {grid_axes = array<i64: 1>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [1]>> -> tensor<8x16xf32>
  %1 = tp.local_split %0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<8x16xf32> -> tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32, #tp.dist<@g, [[1], []]>>
}

// Several steps: the partial sum first (reduce-scatter on the dimension the
// target splits by that axis), then the unwanted split gathered.
// CHECK-LABEL: func.func @combined
// CHECK-NEXT: %[[A:.*]] = tp.reduce_scatter %arg0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>}
// CHECK-SAME: -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}1], [0]]>>
// CHECK-NEXT: %[[B:.*]] = tp.all_gather %[[A]] over @g {dim = 0 : i64, grid_axes = array<i64: 1>}
// CHECK-SAME: -> tensor<8x16xf32, #tp.dist<@g, {{\[\[}}], [0]]>>
// CHECK-NEXT: return %[[B]]
func.func @combined(%x: tensor<8x16xf32, #tp.dist<@g, [[1], []], partial = [0]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], [0]]>> {
  %0 = tp.redistribute %x : tensor<8x16xf32, #tp.dist<@g, [[1], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
  return %0 : tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
}

// -----

tp.grid @g [2]
func.func @create_partial(%x: tensor<8xf32>) -> tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>> {
  // expected-error @+1 {{tp-lower-collectives: cannot create a partial sum over grid axis 0}}
  %0 = tp.redistribute %x : tensor<8xf32> -> tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>>
  return %0 : tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>>
}
