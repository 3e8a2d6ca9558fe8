// RUN: tpc-opt %s --split-input-file --tp-insert-rebalance="granularity=4" \
// RUN:   --verify-diagnostics | FileCheck %s

// Per-rank programs (after tp-partition) on 2 ranks. A Megatron MLP pair:
// fc1's output features, its bias and fc2's reduction features form one
// point; any split suits its ops, so a block is `granularity` features:
// 16 per rank = 4 blocks, 8 in all; capacity 4 * 1.5 = 6 blocks = 24.
// expected-remark @below {{rebalance point @h.0.mlp: 8 blocks over axis 0 (4 per rank, capacity 6), 3 parameter dimensions, 6 tensor dimensions}}
module {
  tp.grid @g [2]
  // CHECK: tp.grid @g [2]
  // CHECK-NEXT: tp.rebalance_point @h.0.mlp over @g axis 0 blocks 8 capacity 6
  // CHECK-LABEL: func.func @mlp
  // CHECK-SAME: %arg1: tensor<8x24xf32> {{{.*}}tp.rebalance_dims = [unit, @h.0.mlp]}
  // CHECK-SAME: %arg2: tensor<24xf32> {{{.*}}tp.rebalance_dims = [@h.0.mlp]}
  // CHECK-SAME: %arg3: tensor<24x8xf32> {{{.*}}tp.rebalance_dims = [@h.0.mlp, unit]}
  // CHECK-SAME: -> tensor<4x8xf32>
  // CHECK: tp.matmul %arg0, %arg1 {tp.rebalance_dims = {{\[\[}}unit, @h.0.mlp]]} : (tensor<4x8xf32>, tensor<8x24xf32>) -> tensor<4x24xf32>
  // CHECK: tp.add {{.*}}tp.rebalance_dims = {{\[\[}}unit, @h.0.mlp]]} : (tensor<4x24xf32>, tensor<24xf32>) -> tensor<4x24xf32>
  // CHECK: tp.gelu {{.*}}tp.rebalance_dims = {{\[\[}}unit, @h.0.mlp]]} : tensor<4x24xf32>
  // The reduction closes the point: fc2's product and the all-reduce keep
  // their shapes and carry no tag.
  // CHECK: %[[Y:.*]] = tp.matmul %{{.*}}, %arg3 : (tensor<4x24xf32>, tensor<24x8xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: tp.all_reduce %[[Y]] over @g {grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<4x8xf32>
  func.func @mlp(%x: tensor<4x8xf32>,
                 %w1: tensor<8x16xf32> {tp.param = "h.0.mlp.fc1.weight", tp.layout = #tp.dist<@g, [[], [0]]>},
                 %b1: tensor<16xf32> {tp.param = "h.0.mlp.fc1.bias", tp.layout = #tp.dist<@g, [[0]]>},
                 %w2: tensor<16x8xf32> {tp.param = "h.0.mlp.fc2.weight", tp.layout = #tp.dist<@g, [[0], []]>}) -> tensor<4x8xf32> {
    %0 = tp.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %1 = tp.add %0, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    %2 = tp.gelu %1 : tensor<4x16xf32>
    %3 = tp.matmul %2, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    %4 = tp.all_reduce %3 over @g {grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<4x8xf32>
    return %4 : tensor<4x8xf32>
  }
}

// -----

// Attention: the reshape to heads cuts the features into heads of 4, so a
// block is one head whatever the granularity: 2 heads per rank, 4 in all,
// capacity 3 (12 features).
// expected-remark @below {{rebalance point @attn: 4 blocks over axis 0 (2 per rank, capacity 3), 2 parameter dimensions}}
module {
  tp.grid @g [2]
  // CHECK-LABEL: func.func @heads
  // CHECK: tp.reshape {{.*}}tp.rebalance_dims = {{\[\[}}unit, @attn, unit]]} : (tensor<8x12xf32>) -> tensor<8x3x4xf32>
  // CHECK: tp.transpose {{.*}} -> tensor<3x8x4xf32>
  // CHECK: tp.softmax {{.*}}tp.rebalance_dims = {{\[\[}}@attn, unit, unit]]} : tensor<3x8x8xf32>
  // CHECK: tp.matmul {{.*}} : (tensor<8x12xf32>, tensor<12x8xf32>) -> tensor<8x8xf32>
  func.func @heads(%x: tensor<8x8xf32>,
                   %wq: tensor<8x8xf32> {tp.param = "attn.q.weight", tp.layout = #tp.dist<@g, [[], [0]]>},
                   %wo: tensor<8x8xf32> {tp.param = "attn.o.weight", tp.layout = #tp.dist<@g, [[0], []]>}) -> tensor<8x8xf32> {
    %q = tp.matmul %x, %wq : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %h = tp.reshape %q : (tensor<8x8xf32>) -> tensor<8x2x4xf32>
    %t = tp.transpose %h {permutation = array<i64: 1, 0, 2>} : (tensor<8x2x4xf32>) -> tensor<2x8x4xf32>
    %s = tp.matmul %t, %t {transpose_rhs} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
    %p = tp.softmax %s {causal} : tensor<2x8x8xf32>
    %o = tp.matmul %p, %t : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
    %b = tp.transpose %o {permutation = array<i64: 1, 0, 2>} : (tensor<2x8x4xf32>) -> tensor<8x2x4xf32>
    %f = tp.reshape %b : (tensor<8x2x4xf32>) -> tensor<8x8xf32>
    %y = tp.matmul %f, %wo : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %r = tp.all_reduce %y over @g {grid_axes = array<i64: 0>} : tensor<8x8xf32> -> tensor<8x8xf32>
    return %r : tensor<8x8xf32>
  }
}

// -----

// Blocks that would reach a collective, or meet a value that differs
// between ranks, cannot move: no point, types unchanged.
// expected-remark @below {{parameter 'gathered.weight' dimension 1 is no rebalance point: '@gathered': 'tp.all_gather' exchanges blocks between ranks, whose shapes must agree}}
// expected-remark @below {{parameter 'sharded_input.out' dimension 0 is no rebalance point: '@sharded_input': 'tp.matmul' combines the blocks with operand 0, which differs between ranks}}
// expected-remark @below {{parameter 'sharded_input.weight' dimension 1 is no rebalance point: '@sharded_input': 'tp.matmul' combines the blocks with operand 0, which differs between ranks}}
module {
  tp.grid @g [2]
  // CHECK-NOT: tp.rebalance_point
  // CHECK-LABEL: func.func @gathered
  // CHECK-SAME: tensor<8x16xf32>
  func.func @gathered(%x: tensor<4x8xf32>,
                      %w: tensor<8x16xf32> {tp.param = "gathered.weight", tp.layout = #tp.dist<@g, [[], [0]]>}) -> tensor<4x32xf32> {
    %0 = tp.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %1 = tp.all_gather %0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<4x16xf32> -> tensor<4x32xf32>
    return %1 : tensor<4x32xf32>
  }
  // Each rank's rows of x (a reduce-scatter's block): a head moved to the
  // other rank would multiply that rank's rows instead.
  // CHECK-LABEL: func.func @sharded_input
  // CHECK-SAME: tensor<8x16xf32>
  func.func @sharded_input(%x: tensor<4x8xf32>,
                           %w: tensor<8x16xf32> {tp.param = "sharded_input.weight", tp.layout = #tp.dist<@g, [[], [0]]>},
                           %w2: tensor<16x8xf32> {tp.param = "sharded_input.out", tp.layout = #tp.dist<@g, [[0], []]>}) -> tensor<2x8xf32> {
    %xs = tp.reduce_scatter %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<2x8xf32>
    %0 = tp.matmul %xs, %w : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
    %1 = tp.matmul %0, %w2 : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
    %2 = tp.all_reduce %1 over @g {grid_axes = array<i64: 0>} : tensor<2x8xf32> -> tensor<2x8xf32>
    return %2 : tensor<2x8xf32>
  }
}

// -----

// Grid [replicas, tensor-parallel]: the ranks along axis 0 hold the same
// blocks of a point over axis 1 (the runtime takes one decision for all), so
// an exchange over axis 0 that keeps the blocks' dimension (a gradient's sum
// over the replicas, a gather of rows, a ring shift of ZeRO-1's shards)
// pairs equal blocks, and the blocks move; one that gathers the blocks' dimension itself would interleave the
// replicas' blocks, and they cannot.
// expected-remark @below {{rebalance point @dp.mlp: 8 blocks over axis 1 (4 per rank, capacity 6), 3 parameter dimensions, 9 tensor dimensions}}
// expected-remark @below {{parameter 'dp_gathered.weight' dimension 1 is no rebalance point: '@dp_gathered': 'tp.all_gather' exchanges blocks between ranks, whose shapes must agree}}
module {
  tp.grid @g [2, 2]
  // CHECK: tp.rebalance_point @dp.mlp over @g axis 1 blocks 8 capacity 6
  // CHECK-LABEL: func.func @replicas
  // CHECK: tp.all_reduce %arg1 over @g {grid_axes = array<i64: 0>, tp.rebalance_dims = {{\[\[}}unit, @dp.mlp]]} : tensor<8x24xf32> -> tensor<8x24xf32>
  // CHECK: tp.all_gather {{.*}}tp.rebalance_dims = {{\[\[}}unit, @dp.mlp]]} : tensor<8x24xf32> -> tensor<16x24xf32>
  // CHECK: tp.ring_shift_wait {{.*}}tp.rebalance_dims = {{\[\[}}unit, @dp.mlp]]} : tensor<8x24xf32>
  func.func @replicas(%x: tensor<4x8xf32>,
                      %w1: tensor<8x16xf32> {tp.param = "dp.mlp.fc1.weight", tp.layout = #tp.dist<@g, [[], [1]]>},
                      %b1: tensor<16xf32> {tp.param = "dp.mlp.fc1.bias", tp.layout = #tp.dist<@g, [[1]]>},
                      %w2: tensor<16x8xf32> {tp.param = "dp.mlp.fc2.weight", tp.layout = #tp.dist<@g, [[1], []]>}) -> (tensor<4x8xf32>, tensor<16x16xf32>, tensor<8x16xf32>) {
    %0 = tp.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %1 = tp.add %0, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    %2 = tp.matmul %1, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    %3 = tp.all_reduce %2 over @g {grid_axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x8xf32>
    %4 = tp.all_reduce %w1 over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32> -> tensor<8x16xf32>
    %5 = tp.all_gather %4 over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32> -> tensor<16x16xf32>
    %6 = tp.ring_shift_start %w1 over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32>
    %7 = tp.ring_shift_wait %6, %w1 : tensor<8x16xf32>
    return %3, %5, %7 : tensor<4x8xf32>, tensor<16x16xf32>, tensor<8x16xf32>
  }
  // CHECK-LABEL: func.func @dp_gathered
  // CHECK-SAME: tensor<8x16xf32>
  func.func @dp_gathered(%w: tensor<8x16xf32> {tp.param = "dp_gathered.weight", tp.layout = #tp.dist<@g, [[], [1]]>}) -> tensor<8x32xf32> {
    %0 = tp.all_gather %w over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32> -> tensor<8x32xf32>
    return %0 : tensor<8x32xf32>
  }
}
