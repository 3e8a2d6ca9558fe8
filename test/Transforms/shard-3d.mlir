// tp-shard{mode=3d} (Bian et al.) on GPT-2 and LLaMA (GQA) from tpc-import,
// batch 4 on a 2x2x2 grid: axis 0 is the weight group (it splits every
// activation's batch and every weight matrix, gathered where used); axes 1
// and 2 are the input and output groups, swapped by consecutive linears.
// The residual stream is [batch over (0, 1), hidden over 2]; each linear
// gathers its input over the batch's second axis, multiplies with its
// weight gathered over axis 0, and reduce-scatters its partial output onto
// the batch over the contraction's axis. Norms keep their features split.

// RUN: tpc-import %S/../Frontends/Inputs/gpt2-tiny.json --batch 4 --seq 8 \
// RUN:   | tpc-opt --tp-shard="mode=3d grid=2x2x2" --tp-lower-collectives \
// RUN:   | FileCheck %s --check-prefix=GPT2
// GPT2: tp.grid @tp [2, 2, 2]
// GPT2-LABEL: func.func @loss(
// Weights: [in over the input's hidden axis and 0, out over the other].
// GPT2-SAME: tensor<96x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"transformer.wte.weight"}
// GPT2-SAME: tensor<64xf32, #tp.dist<@tp, {{\[\[}}2]]>> {{{.*}}"transformer.h.0.ln_1.weight"}
// GPT2-SAME: tensor<64x3x64xf32, #tp.dist<@tp, {{\[\[}}2, 0], [], [1]]>> {{{.*}}"transformer.h.0.attn.c_attn.weight"}
// GPT2-SAME: tensor<64x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"transformer.h.0.attn.c_proj.weight"}
// GPT2-SAME: tensor<64x256xf32, #tp.dist<@tp, {{\[\[}}2, 0], [1]]>> {{{.*}}"transformer.h.0.mlp.c_fc.weight"}
// GPT2-SAME: tensor<256x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"transformer.h.0.mlp.c_proj.weight"}
// GPT2-SAME: tensor<4x8xi32, #tp.dist<@tp, {{\[\[}}0], []]>> {tp.input = "tokens"}
// GPT2-SAME: tensor<4x8xi32, #tp.dist<@tp, {{\[\[}}0, 2], []]>> {tp.input = "targets"}
// The embedding: vocabulary over 1, features over 2, its partial sum
// scattered onto the batch over 1.
// GPT2: tp.all_gather %arg0 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-NEXT: tp.embedding {{.*}} partial = [1]>>
// GPT2: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>} {{.*}} -> tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 1], [], [2]]>>
// GPT2-NEXT: tp.add
// Q, K, V: the norm on split features; its output gathered over 1 once; each
// weight gathered over 0; each output scattered onto the batch over 2.
// GPT2-NEXT: tp.layer_norm {{.*}} : (tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 1], [], [2]]>>, tensor<64xf32, #tp.dist<@tp, {{\[\[}}2]]>>, tensor<64xf32, #tp.dist<@tp, {{\[\[}}2]]>>)
// GPT2: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>}
// GPT2-COUNT-3: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>} : tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0], [], [1]], partial = [2]>> -> tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 2], [], [1]]>>
// Heads over 1, the batch over (0, 2): attention needs no communication.
// GPT2-NOT: tp.all_gather {{.*}} : tensor<4x
// GPT2-NOT: tp.all_reduce
// GPT2-NOT: tp.reduce_scatter
// GPT2: tp.softmax {{.*}} : tensor<4x4x8x8xf32, #tp.dist<@tp, {{\[\[}}0, 2], [1], [], []]>>
// The output projection swaps the groups back: input gathered over 2,
// output scattered over 1 onto the residual's layout.
// GPT2: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>}
// GPT2-NEXT: tp.all_gather %arg6 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-NEXT: tp.matmul {{.*}} -> tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0], [], [2]], partial = [1]>>
// GPT2-NEXT: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>} {{.*}} -> tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 1], [], [2]]>>
// GPT2-NEXT: tp.add
// GPT2-NEXT: tp.add
// The MLP likewise: fc over (1 in, 2 out), proj back.
// GPT2-NEXT: tp.layer_norm
// GPT2-NEXT: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>}
// GPT2-NEXT: tp.all_gather %arg10 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-NEXT: tp.matmul
// GPT2-NEXT: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>} : tensor<4x8x256xf32
// GPT2-NEXT: tp.add
// GPT2-NEXT: tp.gelu
// GPT2-NEXT: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>}
// GPT2-NEXT: tp.all_gather %arg12 over @tp {dim = 0 : i64, grid_axes = array<i64: 0>}
// GPT2-NEXT: tp.matmul
// GPT2-NEXT: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>}
// The tied head: the gathered table reused, vocabulary over 1; the logits
// scattered onto the batch over 2, into a vocabulary-parallel loss.
// GPT2: tp.layer_norm %{{.*}}, %arg26, %arg27 :
// GPT2-NEXT: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>}
// GPT2-NEXT: tp.matmul %{{.*}}, %0 {transpose_rhs} {{.*}} -> tensor<4x8x96xf32, #tp.dist<@tp, {{\[\[}}0], [], [1]], partial = [2]>>
// GPT2-NEXT: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>}
// GPT2-NEXT: tp.cross_entropy {{.*}} : (tensor<4x8x96xf32, #tp.dist<@tp, {{\[\[}}0, 2], [], [1]]>>, tensor<4x8xi32, #tp.dist<@tp, {{\[\[}}0, 2], []]>>) -> tensor<f32, #tp.dist<@tp, [], partial = [0, 2]>>

// RUN: tpc-import %S/../Frontends/Inputs/llama-gqa.json --batch 4 --seq 8 \
// RUN:   | tpc-opt --tp-shard="mode=3d grid=2x2x2" --tp-lower-collectives \
// RUN:   | FileCheck %s --check-prefix=LLAMA
// LLAMA-LABEL: func.func @loss(
// LLAMA-SAME: tensor<64x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"model.layers.0.self_attn.q_proj.weight"}
// LLAMA-SAME: tensor<32x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"model.layers.0.self_attn.k_proj.weight"}
// LLAMA-SAME: tensor<64x64xf32, #tp.dist<@tp, {{\[\[}}2, 0], [1]]>> {{{.*}}"model.layers.0.self_attn.o_proj.weight"}
// LLAMA-SAME: tensor<160x64xf32, #tp.dist<@tp, {{\[\[}}1, 0], [2]]>> {{{.*}}"model.layers.0.mlp.gate_proj.weight"}
// LLAMA-SAME: tensor<64x160xf32, #tp.dist<@tp, {{\[\[}}2, 0], [1]]>> {{{.*}}"model.layers.0.mlp.down_proj.weight"}
// Q, K, V of the grouped heads: scattered onto the batch even through the
// heads-split view the rotary sees; no all-reduce anywhere in the forward.
// LLAMA: tp.rms_norm {{.*}} : (tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 1], [], [2]]>>, tensor<64xf32, #tp.dist<@tp, {{\[\[}}2]]>>)
// LLAMA-NEXT: tp.all_gather {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>}
// LLAMA-COUNT-3: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 2>}
// LLAMA: tp.softmax {{.*}} : tensor<4x2x2x8x8xf32, #tp.dist<@tp, {{\[\[}}0, 2], [1], [], [], []]>>
// LLAMA: tp.reduce_scatter {{.*}} {dim = 0 : i64, grid_axes = array<i64: 1>} {{.*}} -> tensor<4x8x64xf32, #tp.dist<@tp, {{\[\[}}0, 1], [], [2]]>>
// LLAMA-NOT: tp.all_reduce {{.*}} : tensor<4x

// The batch must divide by q * q, the heads by q.
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir --tp-shard="mode=3d grid=2x2x2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BATCH
// BATCH: error: tp-shard: mode=3d splits the batch (size 2) over grid axis 0 and one of axes 1 and 2 (4 ranks), which do not divide it
// RUN: tpc-import %S/../Frontends/Inputs/gpt2-tiny.json --batch 27 --seq 8 \
// RUN:   | not tpc-opt --tp-shard="mode=3d grid=3x3x3" 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: error: tp-shard: n_head (4) is not divisible by the 3 ranks of grid axis 1 or 2, over which 3d splits the heads
