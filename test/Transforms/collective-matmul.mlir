// RUN: tpc-opt %s --tp-collective-matmul | FileCheck %s

// Per-rank programs (after tp-partition). A group of n ranks: n panel steps,
// n-1 shifts, each started before the step's GEMM and waited after it.

tp.grid @g [2, 4]

// Gathered along the lhs rows (M, a free dimension, as sequence
// parallelism's gather before a column-parallel linear): 4 steps over axis 1;
// step i's product is block (r - i) mod 4 of the result, written in place.
// CHECK-LABEL: func.func @gather_rows
// CHECK-NEXT: %[[D0:.*]] = tp.constant 0.000000e+00 : tensor<2x12x16xf32>
// CHECK-NEXT: %[[S0:.*]] = tp.ring_shift_start %arg0 over @g {grid_axes = array<i64: 1>} : tensor<2x3x8xf32>
// CHECK-NEXT: %[[P0:.*]] = tp.matmul %arg0, %arg1 : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT: %[[D1:.*]] = tp.ring_insert %[[P0]] into %[[D0]] over @g {dim = 1 : i64, grid_axes = array<i64: 1>, ring_step = 0 : i64}
// CHECK-NEXT: %[[B1:.*]] = tp.ring_shift_wait %[[S0]], %arg0
// CHECK-NEXT: %[[S1:.*]] = tp.ring_shift_start %[[B1]]
// CHECK-NEXT: %[[P1:.*]] = tp.matmul %[[B1]], %arg1
// CHECK-NEXT: %[[D2:.*]] = tp.ring_insert %[[P1]] into %[[D1]] {{.*}}ring_step = 1
// CHECK-NEXT: %[[B2:.*]] = tp.ring_shift_wait %[[S1]], %[[B1]]
// CHECK-NEXT: %[[S2:.*]] = tp.ring_shift_start %[[B2]]
// CHECK-NEXT: %[[P2:.*]] = tp.matmul %[[B2]], %arg1
// CHECK-NEXT: %[[D3:.*]] = tp.ring_insert %[[P2]] into %[[D2]] {{.*}}ring_step = 2
// CHECK-NEXT: %[[B3:.*]] = tp.ring_shift_wait %[[S2]], %[[B2]]
// CHECK-NEXT: %[[P3:.*]] = tp.matmul %[[B3]], %arg1
// CHECK-NEXT: %[[D4:.*]] = tp.ring_insert %[[P3]] into %[[D3]] {{.*}}ring_step = 3
// CHECK-NEXT: return %[[D4]]
func.func @gather_rows(%x: tensor<2x3x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x12x16xf32> {
  %0 = tp.all_gather %x over @g {dim = 1 : i64, grid_axes = array<i64: 1>} : tensor<2x3x8xf32> -> tensor<2x12x8xf32>
  %1 = tp.matmul %0, %w : (tensor<2x12x8xf32>, tensor<8x16xf32>) -> tensor<2x12x16xf32>
  return %1 : tensor<2x12x16xf32>
}

// A weight gathered along its input features (K, as 2D's row gather): the
// lhs is cut alike and the 2 products summed.
// CHECK-LABEL: func.func @gather_contraction
// CHECK-NEXT: %[[S0:.*]] = tp.ring_shift_start %arg1 over @g {grid_axes = array<i64: 0>} : tensor<4x16xf32>
// CHECK-NEXT: %[[X0:.*]] = tp.ring_slice %arg0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>, ring_step = 0 : i64} : tensor<6x8xf32> -> tensor<6x4xf32>
// CHECK-NEXT: %[[P0:.*]] = tp.matmul %[[X0]], %arg1 {{.*}}-> tensor<6x16xf32>
// CHECK-NEXT: %[[B1:.*]] = tp.ring_shift_wait %[[S0]], %arg1
// CHECK-NEXT: %[[X1:.*]] = tp.ring_slice %arg0 {{.*}}ring_step = 1
// CHECK-NEXT: %[[P1:.*]] = tp.matmul %[[X1]], %[[B1]]
// CHECK-NEXT: %[[Y:.*]] = tp.add %[[P0]], %[[P1]]
// CHECK-NEXT: return %[[Y]]
func.func @gather_contraction(%x: tensor<6x8xf32>, %w: tensor<4x16xf32>) -> tensor<6x16xf32> {
  %0 = tp.all_gather %w over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<4x16xf32> -> tensor<8x16xf32>
  %1 = tp.matmul %x, %0 : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32>
  return %1 : tensor<6x16xf32>
}

// A row-parallel product reduce-scattered along its rows: step i computes
// rows block (r - i - 1) mod 4, adds the running sum from rank r-1 and
// passes it on; the last step's block is the rank's own, and its add says
// so (tp.ring_reduced: tp-insert-rebalance sees a reduce-scatter's result).
// CHECK-LABEL: func.func @matmul_scatter
// CHECK-NEXT: %[[X0:.*]] = tp.ring_slice %arg0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>, ring_step = 1 : i64} : tensor<12x8xf32> -> tensor<3x8xf32>
// CHECK-NEXT: %[[P0:.*]] = tp.matmul %[[X0]], %arg1
// CHECK-NEXT: %[[S0:.*]] = tp.ring_shift_start %[[P0]]
// CHECK-NEXT: %[[X1:.*]] = tp.ring_slice %arg0 {{.*}}ring_step = 2
// CHECK-NEXT: %[[P1:.*]] = tp.matmul %[[X1]], %arg1
// CHECK-NEXT: %[[R1:.*]] = tp.ring_shift_wait %[[S0]], %[[P0]]
// CHECK-NEXT: %[[A1:.*]] = tp.add %[[P1]], %[[R1]] :
// CHECK-NEXT: %[[S1:.*]] = tp.ring_shift_start %[[A1]]
// CHECK-NEXT: tp.ring_slice %arg0 {{.*}}ring_step = 3
// CHECK-NEXT: tp.matmul
// CHECK-NEXT: %[[R2:.*]] = tp.ring_shift_wait %[[S1]], %[[A1]]
// CHECK-NEXT: %[[A2:.*]] = tp.add
// CHECK-NEXT: %[[S2:.*]] = tp.ring_shift_start %[[A2]]
// CHECK-NEXT: tp.ring_slice %arg0 {{.*}}ring_step = 0
// CHECK-NEXT: %[[P3:.*]] = tp.matmul
// CHECK-NEXT: %[[R3:.*]] = tp.ring_shift_wait %[[S2]], %[[A2]]
// CHECK-NEXT: %[[A3:.*]] = tp.add %[[P3]], %[[R3]] {tp.ring_reduced = array<i64: 1>} : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
// CHECK-NEXT: return %[[A3]]
func.func @matmul_scatter(%x: tensor<12x8xf32>, %w: tensor<8x16xf32>) -> tensor<3x16xf32> {
  %0 = tp.matmul %x, %w : (tensor<12x8xf32>, tensor<8x16xf32>) -> tensor<12x16xf32>
  %1 = tp.reduce_scatter %0 over @g {dim = 0 : i64, grid_axes = array<i64: 1>} : tensor<12x16xf32> -> tensor<3x16xf32>
  return %1 : tensor<3x16xf32>
}

// Several matmuls share one ring (the query/key/value projections), a view
// of a weight moved up to the first step; a later use that is not a matmul
// gets the gathered value rebuilt from the same blocks.
// CHECK-LABEL: func.func @shared_ring
// CHECK: tp.reshape %arg2
// CHECK-COUNT-3: tp.constant
// CHECK: tp.ring_shift_start %arg0
// CHECK-NEXT: tp.matmul %arg0, %arg1
// CHECK-NEXT: tp.ring_insert
// CHECK-NEXT: tp.matmul %arg0
// CHECK-NEXT: tp.ring_insert
// CHECK-NEXT: tp.ring_insert %arg0 into
// CHECK-NEXT: tp.ring_shift_wait
// CHECK-NOT: tp.ring_shift_start
// CHECK-NOT: tp.all_gather
// CHECK: tp.gelu
func.func @shared_ring(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %v: tensor<8x2x8xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xf32>) {
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<8x8xf32>
  %1 = tp.matmul %0, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = tp.reshape %v : (tensor<8x2x8xf32>) -> tensor<8x16xf32>
  %3 = tp.matmul %0, %2 : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = tp.gelu %0 : tensor<8x8xf32>
  return %1, %3, %4 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xf32>
}

// Left alone: a use before the first matmul would need the whole value
// first; a product block larger than the gathered operand (a vocabulary
// head) would cost more memory than the ring saves; a group of one rank has
// nothing to move.
// CHECK-LABEL: func.func @used_before
// CHECK-NEXT: tp.all_gather
// CHECK-NOT: ring
// CHECK-LABEL: func.func @wide_head
// CHECK-NEXT: tp.all_gather
// CHECK-NOT: ring
// CHECK-LABEL: func.func @one_rank
// CHECK-NEXT: tp.all_gather
// CHECK-NOT: ring
func.func @used_before(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<8x8xf32>, tensor<8x16xf32>) {
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<8x8xf32>
  %1 = tp.gelu %0 : tensor<8x8xf32>
  %2 = tp.matmul %0, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x16xf32>
}

func.func @wide_head(%x: tensor<4x8xf32>, %w: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %0 = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<8x8xf32>
  %1 = tp.matmul %0, %w : (tensor<8x8xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

tp.grid @one [1]
func.func @one_rank(%x: tensor<8x8xf32>, %w: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = tp.all_gather %x over @one {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x8xf32> -> tensor<8x8xf32>
  %1 = tp.matmul %0, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
