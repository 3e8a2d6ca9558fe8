// tp-shard{dp=N}: data parallelism on grid axis 0 around a scheme on the axes
// after it, on one GPT-2 block (Inputs/, batch 2): the batch split over axis
// 0 before whatever the scheme splits it over, parameters whole over it
// unless shard-optimizer=true (ZeRO-1) stores them split over it too, and
// AdamW updating each parameter in its stored layout. The traffic per layer
// of every mode is checked against docs/schemes.md by
// test/integration/data-parallel.sh.

// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-autodiff --canonicalize --cse \
// RUN:   --tp-shard="mode=1d grid=2 dp=2" | FileCheck %s --check-prefix=DP
// DP: tp.grid @tp [2, 2]
// DP-LABEL: func.func @train_step(
// Megatron's splits on axis 1, none on the data axis.
// DP-SAME: tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}], [1]]>> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.weight"}
// DP-SAME: tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "tokens"}
// DP-SAME: tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "targets"}
// DP: tp.adamw %arg10, {{.*}} : (tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}], [1]]>>, tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}], [1]]>>

// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-autodiff --canonicalize --cse \
// RUN:   --tp-shard="mode=1d grid=2 dp=2 shard-optimizer=true" \
// RUN:   | FileCheck %s --check-prefix=ZERO
// ZERO-LABEL: func.func @train_step(
// Matrices split over the data axis along the dimension Megatron leaves
// whole, vectors after their own split; moments likewise.
// ZERO-SAME: tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.weight"}
// ZERO-SAME: tensor<128xf32, #tp.dist<@tp, {{\[\[}}1, 0]]>> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.bias"}
// ZERO-SAME: tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> {tp.param = "transformer.h.0.mlp.c_fc.weight", tp.state = "exp_avg"}
// Gathered where used, updated in place as stored.
// ZERO: tp.redistribute %arg10 : tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> -> tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}], [1]]>>
// ZERO: tp.adamw %arg10, {{.*}} : (tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>>, tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>>

// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-autodiff --canonicalize --cse \
// RUN:   --tp-shard="mode=1d grid=2 dp=2 shard-optimizer=true shard-whole-dims-only=true" \
// RUN:   | FileCheck %s --check-prefix=ZERO-WHOLE
// For rebalancing (tp-pipeline rebalance=true): split only along dimensions
// Megatron leaves whole, so blocks of its split can move; a vector has none
// and stays whole over the replicas.
// ZERO-WHOLE-LABEL: func.func @train_step(
// ZERO-WHOLE-SAME: tensor<32x128xf32, #tp.dist<@tp, {{\[\[}}0], [1]]>> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.weight"}
// ZERO-WHOLE-SAME: tensor<128xf32, #tp.dist<@tp, {{\[\[}}1]]>> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.bias"}

// dp=1 is the scheme alone: no data axis.
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2d grid=2x2 dp=1" \
// RUN:   | FileCheck %s --check-prefix=DP-ONE
// DP-ONE: tp.grid @tp [2, 2]
// DP-ONE: tensor<2x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "tokens"}

// Batches the replicas (and then the scheme) cannot split: the axes named
// are the module grid's.
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=1d grid=2 dp=4" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DP-BATCH
// DP-BATCH: error: tp-shard: dp=4 splits the batch (size 2) over grid axis 0, which does not divide it
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=2d grid=2x2 dp=2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DP-2D-BATCH
// DP-2D-BATCH: error: tp-shard: mode=2d splits the batch (size 1) over the rows of the grid (axis 1, 2 ranks), which do not divide it
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=3d grid=2x2x2 dp=2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DP-3D-BATCH
// DP-3D-BATCH: error: tp-shard: mode=3d splits the batch (size 1) over grid axis 1 and one of axes 2 and 3 (4 ranks), which do not divide it
