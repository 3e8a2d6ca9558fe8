// tp-shard{mode=2d|2.5d} on one GPT-2 block (Inputs/, from tpc-import): the
// batch split over the rows (axis 0; and depth, axis 2, in 2.5D), heads,
// features and vocabulary over the columns (axis 1), weight matrices in
// q x q blocks, and exactly the forward's collectives.

// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2d grid=2x2" \
// RUN:   --tp-lower-collectives | FileCheck %s --check-prefix=GPT2-2D
// GPT2-2D: tp.grid @tp [2, 2]
// GPT2-2D-LABEL: func.func @loss(
// Weight matrices: split over the columns as Megatron splits them over its
// one axis (vocabulary, heads, column/row-parallel features), and over the
// rows along their other dimension. Vectors are split over the columns or
// replicated.
// GPT2-2D-SAME: tensor<64x32xf32, #tp.dist<@tp, {{\[\[}}1], [0]]>> {{{.*}}"transformer.wte.weight"}
// GPT2-2D-SAME: tensor<16x32xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> {{{.*}}"transformer.wpe.weight"}
// GPT2-2D-SAME: tensor<32xf32> {{{.*}}"transformer.h.0.ln_1.weight"}
// GPT2-2D-SAME: tensor<32x3x32xf32, #tp.dist<@tp, {{\[\[}}0], [], [1]]>> {{{.*}}"transformer.h.0.attn.c_attn.weight"}
// GPT2-2D-SAME: tensor<3x32xf32, #tp.dist<@tp, {{\[\[}}], [1]]>> {{{.*}}"transformer.h.0.attn.c_attn.bias"}
// GPT2-2D-SAME: tensor<32x32xf32, #tp.dist<@tp, {{\[\[}}1], [0]]>> {{{.*}}"transformer.h.0.attn.c_proj.weight"}
// GPT2-2D-SAME: tensor<32xf32, #tp.dist<@tp, {{\[\[}}1]]>> {{{.*}}"transformer.h.0.attn.c_proj.bias"}
// GPT2-2D-SAME: tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> {{{.*}}"transformer.h.0.mlp.c_fc.weight"}
// GPT2-2D-SAME: tensor<128x32xf32, #tp.dist<@tp, {{\[\[}}1], [0]]>> {{{.*}}"transformer.h.0.mlp.c_proj.weight"}
// Token ids and targets split along the batch over the rows.
// GPT2-2D-SAME: tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "tokens"}
// GPT2-2D-SAME: tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "targets"}
// The table gathered over the rows; the lookup's partial sum over the
// vocabulary columns scattered along the hidden dimension.
// GPT2-2D: tp.all_gather %arg0 over @tp {dim = 1 : i64, grid_axes = array<i64: 0>}
// GPT2-2D: tp.embedding {{.*}} -> tensor<2x8x32xf32, #tp.dist<@tp, {{\[\[}}0], [], []], partial = [1]>>
// GPT2-2D: tp.all_gather %arg1 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-2D: tp.reduce_scatter {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>} {{.*}} -> tensor<2x8x32xf32, #tp.dist<@tp, {{\[\[}}0], [], [1]]>>
// Attention: hidden gathered over the columns for the norm and the
// column-parallel Q, K, V (their weights gathered over the rows); heads
// split over the columns, the batch over the rows, through the softmax.
// GPT2-2D: tp.all_gather {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>}
// GPT2-2D-NEXT: tp.layer_norm
// GPT2-2D-COUNT-3: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<32x32xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>>
// GPT2-2D: tp.softmax {{.*}} : tensor<2x4x8x8xf32, #tp.dist<@tp, {{\[\[}}0], [1], [], []]>>
// The output projection row-parallel over the columns: its partial sum
// reduce-scattered along the hidden dimension.
// GPT2-2D: tp.all_gather %arg6 over @tp {dim = 1 : i64, grid_axes = array<i64: 0>}
// GPT2-2D-NEXT: tp.matmul {{.*}} partial = [1]>>
// GPT2-2D-NEXT: tp.reduce_scatter {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>}
// The MLP likewise.
// GPT2-2D: tp.all_gather {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>}
// GPT2-2D-NEXT: tp.layer_norm
// GPT2-2D: tp.all_gather %arg10 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-2D: tp.all_gather %arg12 over @tp {dim = 1 : i64, grid_axes = array<i64: 0>}
// GPT2-2D: tp.reduce_scatter {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>}
// The final norm, then vocabulary-parallel logits (the gathered table
// reused) into a cross-entropy over split tokens: a loss partial over the
// rows, reduced once.
// GPT2-2D: tp.all_gather {{.*}} {dim = 2 : i64, grid_axes = array<i64: 1>}
// GPT2-2D-NEXT: tp.layer_norm
// GPT2-2D-NOT: tp.all_gather
// GPT2-2D: tp.cross_entropy {{.*}} : (tensor<2x8x64xf32, #tp.dist<@tp, {{\[\[}}0], [], [1]]>>, tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>>) -> tensor<f32, #tp.dist<@tp, [], partial = [0]>>
// GPT2-2D-NEXT: tp.all_reduce {{.*}} {grid_axes = array<i64: 0>} : tensor<f32, #tp.dist<@tp, [], partial = [0]>> -> tensor<f32>
// GPT2-2D-NOT: tp.all_gather
// GPT2-2D-NOT: tp.reduce_scatter
// GPT2-2D-NOT: tp.all_reduce

// 2.5D: the batch split over depth and rows, the loss partial over both.
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2.5d grid=2x2x1" \
// RUN:   | FileCheck %s --check-prefix=GPT2-25D
// GPT2-25D: tp.grid @tp [2, 2, 1]
// GPT2-25D: tp.embedding {{.*}} -> tensor<2x8x32xf32, #tp.dist<@tp, {{\[\[}}2, 0], [], []], partial = [1]>>
// GPT2-25D: tp.cross_entropy {{.*}} -> tensor<f32, #tp.dist<@tp, [], partial = [0, 2]>>

// The partitioned training step rescales the cross-entropy over split
// tokens to the global mean, forward and backward.
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-autodiff --canonicalize --cse \
// RUN:   --tp-shard="mode=2d grid=2x2" --tp-lower-collectives --tp-partition \
// RUN:   | FileCheck %s --check-prefix=GPT2-2D-TRAIN
// GPT2-2D-TRAIN-LABEL: func.func @train_step(
// GPT2-2D-TRAIN-SAME: tensor<1x8xi32> {tp.input = "tokens", tp.layout = #tp.dist<@tp, {{\[\[}}0], []]>}
// GPT2-2D-TRAIN: %[[LOSS:.*]] = tp.cross_entropy
// GPT2-2D-TRAIN-NEXT: tp.scale %[[LOSS]], 5.000000e-01
// GPT2-2D-TRAIN: %[[DLOSS:.*]] = tp.scale %{{.*}}, 5.000000e-01
// GPT2-2D-TRAIN-NEXT: tp.cross_entropy_grad %{{.*}}, %{{.*}}, %[[DLOSS]]

// Grids and batches the schemes cannot split are one-line errors.
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2.5d grid=2x2x2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BATCH
// BATCH: error: tp-shard: mode=2.5d splits the batch (size 2) over the rows and depth of the grid (axes 0 and 2, 4 ranks), which do not divide it
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2d grid=3x3" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=HEADS
// HEADS: error: tp-shard: n_head (4) is not divisible by the 3 columns of the grid (axis 1), over which 2d splits the heads
