// RUN: tpc-opt %s -split-input-file -verify-diagnostics --tp-partition | FileCheck %s

// Split dims shrink by their number of shards; layouts disappear; the grid
// stays, for the collectives and parameter layouts that name it.
// CHECK-NOT: module attributes
// CHECK: tp.grid @g [2, 4]
// CHECK-NOT: #tp.dist
// CHECK-LABEL: func.func @local_shapes
// CHECK-SAME: (%{{.*}}: tensor<4x16xf32>, %{{.*}}: tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK: tp.matmul %{{.*}}, %{{.*}} : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
tp.grid @g [2, 4]
func.func @local_shapes(%x: tensor<8x16xf32, #tp.dist<@g, [[0], []]>>,
                        %w: tensor<16x32xf32, #tp.dist<@g, [[], [1]]>>)
    -> tensor<8x32xf32, #tp.dist<@g, [[0], [1]]>> {
  %0 = tp.matmul %x, %w : (tensor<8x16xf32, #tp.dist<@g, [[0], []]>>, tensor<16x32xf32, #tp.dist<@g, [[], [1]]>>) -> tensor<8x32xf32, #tp.dist<@g, [[0], [1]]>>
  return %0 : tensor<8x32xf32, #tp.dist<@g, [[0], [1]]>>
}

// -----

// Without a grid the program runs on one rank, unchanged.
// CHECK-NOT: module attributes
// CHECK-LABEL: func.func @one_rank
// CHECK: tp.gelu %{{.*}} : tensor<4xf32>
func.func @one_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

tp.grid @g [2]
func.func @nonlinear_partial(%x: tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>>) {
  // expected-error @+1 {{tp-partition: consumes a pending partial sum but is not linear; reduce it first}}
  %0 = tp.gelu %x : tensor<8xf32, #tp.dist<@g, [[]], partial = [0]>>
  return
}

// -----

tp.grid @g [2]
func.func @split_softmax_statistics(%x: tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>) {
  // A softmax's kernel does not combine statistics of split columns.
  // expected-error @+1 {{tp-partition: this op cannot run with dimension 1 of operand #0 split}}
  %0 = tp.softmax %x : tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>
  return
}

// -----

// A norm with split features keeps their axes for its kernel, which gathers
// the rows' statistics over them (2D and 3D layer norms); the batch may be
// split as well, and the gamma gradients are partial over it.
tp.grid @g [2, 2]
func.func @split_features(%x: tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, %g: tensor<8xf32, #tp.dist<@g, [[0]]>>, %b: tensor<8xf32, #tp.dist<@g, [[0]]>>) {
  %0 = tp.layer_norm %x, %g, %b : (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]]>>, tensor<8xf32, #tp.dist<@g, [[0]]>>) -> tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>
  %1:3 = tp.layer_norm_grad %0, %x, %g : (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]]>>) -> (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]], partial = [1]>>, tensor<8xf32, #tp.dist<@g, [[0]], partial = [1]>>)
  %2 = tp.rms_norm %x, %g : (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]]>>) -> tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>
  %3:2 = tp.rms_norm_grad %2, %x, %g : (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]]>>) -> (tensor<4x8xf32, #tp.dist<@g, [[1], [0]]>>, tensor<8xf32, #tp.dist<@g, [[0]], partial = [1]>>)
  return
}
// CHECK-LABEL: func.func @split_features
// CHECK: tp.layer_norm %{{.*}} {tp.feature_axes = array<i64: 0>} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK: tp.layer_norm_grad %{{.*}} {tp.feature_axes = array<i64: 0>}
// CHECK: tp.rms_norm %{{.*}} {tp.feature_axes = array<i64: 0>}
// CHECK: tp.rms_norm_grad %{{.*}} {tp.feature_axes = array<i64: 0>}

// -----

tp.grid @g [2]
func.func @split_features_gamma_whole(%x: tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>, %g: tensor<8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{tp-partition: a feature-split tp.layer_norm needs its row-shaped values split alike (none partial) and its gamma-shaped values split along the features as the rows are}}
  %0 = tp.layer_norm %x, %g, %b : (tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>
  return
}

// -----

tp.grid @g [2]
func.func @rank_dependent(%x: tensor<4x8x8xf32, #tp.dist<@g, [[], [0], []]>>) {
  // A causal mask needs the global query and key positions.
  // expected-error @+1 {{tp-partition: this op cannot run with dimension 1 of operand #0 split}}
  %0 = tp.softmax %x {causal} : tensor<4x8x8xf32, #tp.dist<@g, [[], [0], []]>>
  return
}

// -----

tp.grid @g [2]
func.func @rotary_positions(%x: tensor<2x8x4xf32, #tp.dist<@g, [[], [0], []]>>) {
  // The rotation angle depends on the global position along dim -2.
  // expected-error @+1 {{tp-partition: this op cannot run with dimension 1 of operand #0 split}}
  %0 = tp.rotary %x : tensor<2x8x4xf32, #tp.dist<@g, [[], [0], []]>>
  return
}

// -----

// Split heads rotate independently.
// CHECK-LABEL: func.func @rotary_heads
// CHECK: tp.rotary %{{.*}} : tensor<1x8x4xf32>
tp.grid @g [2]
func.func @rotary_heads(%x: tensor<2x8x4xf32, #tp.dist<@g, [[0], [], []]>>) {
  %0 = tp.rotary %x : tensor<2x8x4xf32, #tp.dist<@g, [[0], [], []]>>
  return
}

// -----

tp.grid @g [2]
func.func @mean_count(%x: tensor<4x8xf32, #tp.dist<@g, [[0], []]>>) {
  // The kernel would divide by its local count.
  // expected-error @+1 {{tp-partition: this op cannot run with dimension 0 of operand #0 split}}
  %0 = tp.reduce_mean %x {dims = array<i64: 1>} : (tensor<4x8xf32, #tp.dist<@g, [[0], []]>>) -> tensor<4xf32, #tp.dist<@g, [[0]]>>
  return
}

// -----

// A vocabulary-split table: each rank holds 8 of the 16 rows and the
// lookup leaves a partial sum; the vocabulary axes stay on the op.
// CHECK-LABEL: func.func @vocab_parallel
// CHECK: tp.embedding %{{.*}}, %{{.*}} {tp.vocab_axes = array<i64: 1, 0>} : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<4x4xf32>
tp.grid @g [2, 2, 2]
func.func @vocab_parallel(%t: tensor<16x8xf32, #tp.dist<@g, [[1, 0], [2]]>>, %ids: tensor<4xi32>) {
  %0 = tp.embedding %t, %ids : (tensor<16x8xf32, #tp.dist<@g, [[1, 0], [2]]>>, tensor<4xi32>) -> tensor<4x8xf32, #tp.dist<@g, [[], [2]], partial = [0, 1]>>
  return
}

// -----

// A vocabulary-split cross-entropy: each rank holds a quarter of the logit
// columns; the loss is whole on every rank.
// CHECK-LABEL: func.func @vocab_parallel_loss
// CHECK: tp.cross_entropy %{{.*}}, %{{.*}} {tp.vocab_axes = array<i64: 0, 1>} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<f32>
tp.grid @g [2, 2]
func.func @vocab_parallel_loss(%logits: tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0, 1]]>>, %targets: tensor<2x8xi32>) -> tensor<f32> {
  %0 = tp.cross_entropy %logits, %targets : (tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0, 1]]>>, tensor<2x8xi32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

tp.grid @g [2, 2]
func.func @vocab_parallel_loss_split_tokens(%logits: tensor<2x8x64xf32, #tp.dist<@g, [[1], [], [0]]>>, %targets: tensor<2x8xi32, #tp.dist<@g, [[1], []]>>) {
  // expected-error @+1 {{tp-partition: a vocabulary-split tp.cross_entropy needs logits split along the tokens as the targets are, and a result laid out like the loss or the logits}}
  %0 = tp.cross_entropy %logits, %targets : (tensor<2x8x64xf32, #tp.dist<@g, [[1], [], [0]]>>, tensor<2x8xi32, #tp.dist<@g, [[1], []]>>) -> tensor<f32>
  return
}

// -----

tp.grid @g [2]
func.func @vocab_parallel_not_partial(%t: tensor<16x8xf32, #tp.dist<@g, [[0], []]>>, %ids: tensor<4xi32>) {
  // expected-error @+1 {{tp-partition: a vocabulary-split embedding needs a result split along the tokens as the ids are and partial over exactly the table's vocabulary axes}}
  %0 = tp.embedding %t, %ids : (tensor<16x8xf32, #tp.dist<@g, [[0], []]>>, tensor<4xi32>) -> tensor<4x8xf32>
  return
}

// -----

tp.grid @g [2, 2]
func.func @vocab_parallel_split_ids(%t: tensor<16x8xf32, #tp.dist<@g, [[0], []]>>, %ids: tensor<4xi32, #tp.dist<@g, [[1]]>>) {
  // expected-error @+1 {{tp-partition: a vocabulary-split embedding needs a result split along the tokens as the ids are}}
  %0 = tp.embedding %t, %ids : (tensor<16x8xf32, #tp.dist<@g, [[0], []]>>, tensor<4xi32, #tp.dist<@g, [[1]]>>) -> tensor<4x8xf32, #tp.dist<@g, [[], []], partial = [0]>>
  return
}

// -----

// A partial sum flows through linear ops into its reduction; the
// parameter's layout is kept on the argument for the plan.
// CHECK-LABEL: func.func @linear_partial
// CHECK-SAME: (%{{.*}}: tensor<4x4xf32>, %{{.*}}: tensor<4x8xf32> {tp.layout = #tp.dist<@g, {{\[\[}}0], []]>, tp.param = "w"})
// CHECK: tp.matmul {{.*}} -> tensor<4x8xf32>
// CHECK: tp.scale {{.*}} : tensor<4x8xf32>
// CHECK: tp.all_reduce %{{.*}} over @g {grid_axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<4x8xf32>
tp.grid @g [2]
func.func @linear_partial(%x: tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>, %w: tensor<8x8xf32, #tp.dist<@g, [[0], []]>> {tp.param = "w"}) -> tensor<4x8xf32> {
  %0 = tp.matmul %x, %w : (tensor<4x8xf32, #tp.dist<@g, [[], [0]]>>, tensor<8x8xf32, #tp.dist<@g, [[0], []]>>) -> tensor<4x8xf32, #tp.dist<@g, [[], []], partial = [0]>>
  %1 = tp.scale %0, 0.5 : tensor<4x8xf32, #tp.dist<@g, [[], []], partial = [0]>>
  %2 = tp.all_reduce %1 over @g {grid_axes = array<i64: 0>} : tensor<4x8xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

tp.grid @g [2]
func.func @redistribute(%x: tensor<8xf32>) {
  // expected-error @+1 {{tp-partition: lower layout changes to collectives before partitioning}}
  %0 = tp.redistribute %x : tensor<8xf32> -> tensor<8xf32, #tp.dist<@g, [[0]]>>
  return
}

// -----

tp.grid @g [2]
func.func @uneven(%x: tensor<8xf32, #tp.dist<@g, [[0]], sizes = [[3, 5]]>>) {
  // expected-error @+1 {{is split unevenly, which the per-rank program cannot express yet}}
  %0 = tp.gelu %x : tensor<8xf32, #tp.dist<@g, [[0]], sizes = [[3, 5]]>>
  return
}

// -----

// Vocabulary-parallel gradients: the logits' gradient columns and the table
// gradient's rows split; both keep their vocabulary axes.
// CHECK-LABEL: func.func @vocab_parallel_grads
// CHECK: tp.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {tp.vocab_axes = array<i64: 0>} : (tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x32xf32>
// CHECK: tp.embedding_grad %{{.*}}, %{{.*}} {tp.vocab_axes = array<i64: 0>} : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<32x16xf32>
tp.grid @g [2]
func.func @vocab_parallel_grads(%logits: tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>, %targets: tensor<2x8xi32>, %dloss: tensor<f32>, %dy: tensor<2x8x16xf32>) {
  %0 = tp.cross_entropy_grad %logits, %targets, %dloss : (tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>
  %1 = tp.embedding_grad %dy, %targets : (tensor<2x8x16xf32>, tensor<2x8xi32>) -> tensor<64x16xf32, #tp.dist<@g, [[0], []]>>
  return
}

// -----

tp.grid @g [2]
func.func @vocab_parallel_grad_split_tokens(%dy: tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{tp-partition: a vocabulary-split embedding_grad needs ids and output gradient split alike along the tokens and the gradient's features split as the table's}}
  %0 = tp.embedding_grad %dy, %ids : (tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>, tensor<2x8xi32>) -> tensor<64x16xf32, #tp.dist<@g, [[0], []]>>
  return
}
