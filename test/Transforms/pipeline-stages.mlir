// tp-pipeline-stages through tp-pipeline: a 4-layer GPT-2 (h 32, 4 heads,
// vocabulary 64, batch 4 x seq 8) cut into pipeline stages.
//
// RUN: echo '{"model_type": "gpt2", "vocab_size": 64, "n_embd": 32, "n_layer": 4, "n_head": 4, "n_positions": 16}' > %t.json
// RUN: tpc-import %t.json --batch 4 --seq 8 -o %t.mlir
//
// 1F1B over 2 stages of 1D 2, 2 micro-batches of 2 sequences: the grid
// [pp, tensor], two layers per stage (the balanced cut), stage 0 runs one
// forward ahead, stage 1 alternates.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=2 pp=2 microbatches=2" 2>%t.remarks | FileCheck %s --check-prefix=1F1B
// 1F1B: tp.pipeline = {chunks = 1 : i64, layer_seconds = array<f64: {{[-+0-9.eE, ]+}}>, layers = array<i64: 2, 2>, microbatches = 2 : i64, schedule = "1f1b", stages = 2 : i64}
// 1F1B: tp.grid @tp [2, 2]
// 1F1B-LABEL: func.func @train_step_stage0
// The tied embedding table's shard (the vocabulary split over the tensor
// axis) goes to the head's stage once a step, before anything waits.
// 1F1B-SAME: tp.param = "transformer.wte.weight"
// 1F1B-SAME: tp.schedule = "F0 F1 B0 B1", tp.stage = 0
// 1F1B-NEXT: tp.send_start %arg0 over @tp to 1 tag 0 {{.*}} : tensor<32x32xf32>
// Each micro-batch's token ids are a block of the rank's rows.
// 1F1B: tp.slice %{{.*}} {offsets = array<i64: 0, 0>{{.*}}: (tensor<4x8xi32>) -> tensor<2x8xi32>
// 1F1B: tp.send_start %[[ACT0:.*]] over @tp to 1 tag 1 {{.*}} : tensor<2x8x32xf32>
// The gradient of micro-batch 0 is posted for before F1 runs.
// 1F1B-NEXT: %[[GRAD0:.*]] = tp.recv_start over @tp from 1 tag 0 {{.*}} : tensor<2x8x32xf32>
// 1F1B: tp.slice %{{.*}} {offsets = array<i64: 2, 0>{{.*}}: (tensor<4x8xi32>) -> tensor<2x8xi32>
// 1F1B: tp.send_start %[[ACT1:.*]] over @tp to 1 tag 2 {{.*}} : tensor<2x8x32xf32>
// 1F1B: tp.send_wait %[[ACT0]] over @tp to 1 tag 1
// 1F1B: tp.recv_wait %[[GRAD0]]
// The sums over the stages: the tied table's gradient parts, the squared
// gradient norm, the loss.
// 1F1B: tp.all_reduce %{{.*}} over @tp {grid_axes = array<i64: 0>{{.*}} : tensor<32x32xf32>
// 1F1B: tp.clip_scale
// 1F1B: return
// 1F1B-LABEL: func.func @train_step_stage1
// 1F1B-SAME: tp.schedule = "F0 B0 F1 B1", tp.stage = 1
// 1F1B-NEXT: tp.recv_start over @tp from 0 tag 0 {{.*}} : tensor<32x32xf32>
// 1F1B: tp.recv_start over @tp from 0 tag 1 {{.*}} : tensor<2x8x32xf32>
// 1F1B: tp.send_start %{{.*}} over @tp to 0 tag 0 {{.*}} : tensor<2x8x32xf32>
// 1F1B-NOT: func.func
// 1F1B: tp.send_start %{{.*}} over @tp to 0 tag 1 {{.*}} : tensor<2x8x32xf32>
// The held-out @loss is cut the same way and runs the forward halves in
// the schedule's order; the last stage's loss is summed over the stages.
// 1F1B-LABEL: func.func @loss_stage0
// 1F1B-SAME: tp.schedule = "F0 F1", tp.stage = 0
// 1F1B-NEXT: tp.send_start %arg0 over @tp to 1 tag 0 {{.*}} : tensor<32x32xf32>
// 1F1B: tp.send_start %{{.*}} over @tp to 1 tag 1 {{.*}} : tensor<2x8x32xf32>
// 1F1B: tp.send_start %{{.*}} over @tp to 1 tag 2 {{.*}} : tensor<2x8x32xf32>
// 1F1B-NOT: tp.send_start
// 1F1B: tp.all_reduce %{{.*}} over @tp {grid_axes = array<i64: 0>{{.*}} : tensor<f32>
// 1F1B-LABEL: func.func @loss_stage1
// 1F1B-SAME: tp.schedule = "F0 F1", tp.stage = 1
// 1F1B-NOT: tp.send_start
// 1F1B: tp.linear_cross_entropy
// 1F1B: tp.linear_cross_entropy
// 1F1B: tp.all_reduce %{{.*}} over @tp {grid_axes = array<i64: 0>{{.*}} : tensor<f32>

// Only the residual stream crosses (one activation and one gradient per
// micro-batch), and each rank sends its own shard of the table.
// RUN: FileCheck %s --check-prefix=1F1B-TRAFFIC < %t.remarks
// 1F1B-TRAFFIC: @train_step_stage0 communication per rank: {{.*}}send 8192 bytes (3 calls)
// 1F1B-TRAFFIC: @train_step_stage1 communication per rank: {{.*}}send 4096 bytes (2 calls)
// 1F1B-TRAFFIC: @loss_stage0 communication per rank: {{.*}}send 8192 bytes (3 calls)
// 1F1B-TRAFFIC-NOT: @loss_stage1 {{.*}}send

// GPipe: every forward, then every backward; an explicit cut.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=2 schedule=gpipe stages=3,1" -o - 2>/dev/null | FileCheck %s --check-prefix=GPIPE
// GPIPE: layers = array<i64: 3, 1>, microbatches = 2 : i64, schedule = "gpipe"
// GPIPE: tp.schedule = "F0 F1 B0 B1", tp.stage = 0
// GPIPE: tp.schedule = "F0 F1 B0 B1", tp.stage = 1

// The interleaved schedule: 2 chunks per stage, one layer each; chunk c of stage s
// holds layer group 2c + s (Megatron-LM's order of virtual micro-batches).
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=4 schedule=interleaved pp-chunks=2" -o - 2>/dev/null | FileCheck %s --check-prefix=INTER
// INTER: chunks = 2 : i64, layer_seconds = array<f64: {{[-+0-9.eE, ]+}}>, layers = array<i64: 1, 1, 1, 1>, microbatches = 4 : i64, schedule = "interleaved"
// INTER: tp.schedule = "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0", tp.stage = 0
// INTER: tp.schedule = "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0", tp.stage = 1

// Gradient accumulation alone: one stage, the micro-batches' gradients
// summed in order before the optimizer.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 microbatches=2" -o - 2>/dev/null | FileCheck %s --check-prefix=ACCUM
// ACCUM: tp.grid @tp [1, 1]
// ACCUM: tp.schedule = "F0 B0 F1 B1", tp.stage = 0
// ACCUM-NOT: send_start
// ACCUM: tp.adamw

// Data parallelism with ZeRO-1 and 2D schemes keep their axes after pp.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=2 dp=2 shard-optimizer=true pp=2 microbatches=2" -o - 2>/dev/null | FileCheck %s --check-prefix=DP
// DP: tp.grid @tp [2, 2, 2]
// DP-COUNT-2: tp.stage
// ZeRO-1's reduce-scatters take the sum over the micro-batches, once a
// step: one per parameter, 26 on stage 0 (wte, wpe and 2 layers of 12) and
// 27 on stage 1 (2 layers, ln_f and the tied table's part), not one per
// parameter and micro-batch.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=2 dp=2 shard-optimizer=true pp=2 microbatches=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=DP-SCATTER
// DP-SCATTER: @train_step_stage0 communication per rank: {{.*}}reduce_scatter {{[0-9]+}} bytes (26 calls)
// DP-SCATTER: @train_step_stage1 communication per rank: {{.*}}reduce_scatter {{[0-9]+}} bytes (27 calls)
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=2d grid=2x2 pp=2 microbatches=2" -o - 2>/dev/null | FileCheck %s --check-prefix=TWO-D
// TWO-D: tp.grid @tp [2, 2, 2]

// mode=auto times a pipeline candidate's micro-batch on a one-stage program
// of micro-batch 0 alone (single-microbatch=true): every op of it tagged
// with its micro-batch, the layer it is cut with (the embedding with the
// first, the head and loss with the last) and its half, and each running
// sum over the micro-batches an add, as a later micro-batch makes it.
// RUN: tpc-opt %t.mlir --canonicalize --cse --tp-fuse-attention --tp-fuse-elementwise="across-layers=false" --tp-autodiff="mark-backward=true" --canonicalize --cse --tp-shard="mode=1d grid=2 microbatches=2" --tp-lower-collectives --tp-partition --tp-pipeline-stages="single-microbatch=true" | FileCheck %s --check-prefix=ONE
// ONE: tp.grid @tp [1, 2]
// ONE-LABEL: func.func @train_step_stage0
// ONE-SAME: tp.schedule = "F0 B0"
// ONE: tp.embedding {{.*}} {tp.layer = 0 : i64, tp.microbatch = 0 : i64
// ONE: tp.cross_entropy_grad {{.*}} {tp.backward, tp.layer = 3 : i64, tp.microbatch = 0 : i64
// The tied table's gradient (the lookup's part plus the head's), then its
// running sum.
// ONE: tp.embedding_grad {{.*}} {tp.backward, tp.layer = 0 : i64, tp.microbatch = 0 : i64
// ONE-NEXT: %[[GRAD:.*]] = tp.add %{{.*}}, %{{.*}} {tp.backward, tp.layer = 0 : i64, tp.microbatch = 0 : i64}
// ONE-NEXT: tp.add %[[GRAD]], %[[GRAD]] {tp.backward, tp.layer = 0 : i64, tp.microbatch = 0 : i64}
// ONE-LABEL: func.func @loss_stage0
// ONE-SAME: tp.schedule = "F0"
// RUN: not tpc-opt %t.mlir --canonicalize --tp-autodiff="mark-backward=true" --tp-shard="mode=1d grid=2 microbatches=2" --tp-lower-collectives --tp-partition --tp-pipeline-stages="single-microbatch=true pp=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ONE-STAGE
// ONE-STAGE: error: tp-pipeline-stages: single-microbatch=true times one stage; it needs pp=1

// Errors.
// RUN: not tpc-opt %t.mlir --tp-pipeline="pp=2" 2>&1 | FileCheck %s --check-prefix=NO-MODE
// NO-MODE: tp-pipeline: pp and microbatches need a mode, e.g. mode=1d (grid=1 for pipeline parallelism alone)
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=2 pp=2 rebalance=true" 2>&1 | FileCheck %s --check-prefix=REBALANCE
// REBALANCE: tp-pipeline: rebalance=true does not work with pp or microbatches yet
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=3" 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: tp-shard: microbatches=3 splits the batch (size 4) over grid axis 0, which does not divide it
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=2 stages=3,2" 2>&1 | FileCheck %s --check-prefix=LAYERS
// LAYERS: tp-pipeline-stages: layers= adds up to 5 layers, but the model has 4
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=8 microbatches=2" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// TOO-MANY: tp-pipeline-stages: 8 pipeline groups (pp x pp-chunks) need at least as many layers; the model has 4
// The options' own rules (pipelineOptionsProblem), from tp-pipeline and
// from the pass alone.
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=2 schedule=interleaved" 2>&1 | FileCheck %s --check-prefix=NO-CHUNKS
// NO-CHUNKS: tp-pipeline: schedule=interleaved needs pp-chunks=V with V > 1
// RUN: not tpc-opt %t.mlir --tp-pipeline-stages="pp=2 schedule=interleaved" 2>&1 | FileCheck %s --check-prefix=PASS-NO-CHUNKS
// PASS-NO-CHUNKS: tp-pipeline-stages: schedule=interleaved needs pp-chunks=V with V > 1
// RUN: not tpc-opt %t.mlir --tp-pipeline-stages="pp=2 pp-chunks=2" 2>&1 | FileCheck %s --check-prefix=PASS-CHUNKS
// PASS-CHUNKS: tp-pipeline-stages: pp-chunks=2 needs schedule=interleaved
// RUN: not tpc-opt %t.mlir --tp-pipeline-stages="pp=0" 2>&1 | FileCheck %s --check-prefix=PASS-PP
// PASS-PP: tp-pipeline-stages: pp=0 is not a positive number of stages
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=1 schedule=interleaved pp-chunks=2" 2>&1 | FileCheck %s --check-prefix=INTER-M
// INTER-M: error: tp-pipeline-stages: schedule=interleaved needs the micro-batches (1) to be a multiple of pp=2
// RUN: not tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 pp=2 microbatches=2 train=false" 2>&1 | FileCheck %s --check-prefix=NO-TRAIN
// NO-TRAIN: tp-pipeline: pp and microbatches cut the training step; they need train=true

// Plans record the pipeline (format 1.12; stage cuts 1.13) and which stage runs each
// program; gradient accumulation alone is one stage.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=1 microbatches=2" -o %t.tpplan
// RUN: tp-run %t.tpplan --print-plan | FileCheck %s --check-prefix=PLAN
// PLAN:      "pipeline": {
// PLAN-NEXT:   "axis": 0,
// PLAN-NEXT:   "stages": 1,
// PLAN-NEXT:   "microbatches": 2,
// PLAN-NEXT:   "chunks": 1,
// PLAN-NEXT:   "schedule": "1f1b",
// PLAN:      "name": "train_step",
// PLAN-NEXT: "arena_bytes": {{[0-9]+}},
// PLAN-NEXT: "stage": 0,

// Two stages: every stage's program makes the same collectives over the
// stage axis after the whole pipeline, so the loader's replay accepts it.
// RUN: tpc-opt %t.mlir --tp-pipeline="mode=1d grid=2 pp=2 microbatches=2" -o %t.pp.tpplan
// RUN: tp-run %t.pp.tpplan --print-plan | FileCheck %s --check-prefix=PP-PLAN
// PP-PLAN:      "stages": 2,
// PP-PLAN:      "name": "train_step",
// PP-PLAN-NEXT: "arena_bytes": {{[0-9]+}},
// PP-PLAN-NEXT: "stage": 0,
// PP-PLAN:      "name": "train_step",
// PP-PLAN-NEXT: "arena_bytes": {{[0-9]+}},
// PP-PLAN-NEXT: "stage": 1,
// PP-PLAN:      "name": "loss",
// PP-PLAN-NEXT: "arena_bytes": {{[0-9]+}},
// PP-PLAN-NEXT: "stage": 0,
// PP-PLAN:      "name": "loss",
// PP-PLAN-NEXT: "arena_bytes": {{[0-9]+}},
// PP-PLAN-NEXT: "stage": 1,

// Stage cuts for stage rebalancing (stage-moves=K): 6 layers on 3 stages,
// the balanced cut (2,2,2) and each move of one layer off a stage to a
// neighbour, in stage order. A stage whose layers a cut leaves alone runs
// the program of cut 0 (stage 0 under (2,1,3) and (2,3,1), stage 2 under
// (1,3,2) and (3,1,2)): one function serves several cuts; the others are
// named for their cut. Each layer's predicted time is recorded.
// RUN: echo '{"model_type": "gpt2", "vocab_size": 64, "n_embd": 32, "n_layer": 6, "n_head": 4, "n_positions": 16}' > %t.six.json
// RUN: tpc-import %t.six.json --batch 6 --seq 8 -o %t.six.mlir
// RUN: tpc-opt %t.six.mlir --tp-pipeline="mode=1d grid=1 pp=3 microbatches=3 stage-moves=1" 2>/dev/null | FileCheck %s --check-prefix=CUTS
// CUTS: tp.pipeline = {chunks = 1 : i64, cuts = [array<i64: 2, 2, 2>, array<i64: 1, 3, 2>, array<i64: 2, 1, 3>, array<i64: 3, 1, 2>, array<i64: 2, 3, 1>], layer_seconds = array<f64: {{([-+0-9.eE]+, ){5}[-+0-9.eE]+}}>, layers = array<i64: 2, 2, 2>
// CUTS-DAG: func.func @train_step_stage0({{.*}} tp.cuts = array<i64: 0, 2, 4>, {{.*}}tp.stage = 0
// CUTS-DAG: func.func @train_step_stage1({{.*}} tp.cuts = array<i64: 0>, {{.*}}tp.stage = 1
// CUTS-DAG: func.func @train_step_stage2({{.*}} tp.cuts = array<i64: 0, 1, 3>, {{.*}}tp.stage = 2
// CUTS-DAG: func.func @train_step_stage0_cut1({{.*}} tp.cuts = array<i64: 1>, {{.*}}tp.stage = 0
// CUTS-DAG: func.func @train_step_stage1_cut2({{.*}} tp.cuts = array<i64: 2>, {{.*}}tp.stage = 1
// CUTS-DAG: func.func @train_step_stage2_cut4({{.*}} tp.cuts = array<i64: 4>, {{.*}}tp.stage = 2
// CUTS-DAG: func.func @loss_stage2({{.*}} tp.cuts = array<i64: 0, 1, 3>, {{.*}}tp.stage = 2
// CUTS-NOT: func.func @train_step_stage0_cut2
// A parameter of layer 2 lives on stage 1, except under the cuts that move
// layer 2 to stage 0 (cut 3) or (never) to stage 2; the plan says so.
// RUN: tpc-opt %t.six.mlir --tp-pipeline="mode=1d grid=1 pp=3 microbatches=3 stage-moves=1" -o %t.six.tpplan
// RUN: tp-run %t.six.tpplan --print-plan | FileCheck %s --check-prefix=CUT-PLAN
// CUT-PLAN:      "name": "transformer.h.2.attn.c_attn.weight",
// CUT-PLAN:      "stage": 1,
// CUT-PLAN-NEXT: "cut_stages": [
// CUT-PLAN-NEXT:   1,
// CUT-PLAN-NEXT:   1,
// CUT-PLAN-NEXT:   1,
// CUT-PLAN-NEXT:   0,
// CUT-PLAN-NEXT:   1
// CUT-PLAN-NEXT: ],
// RUN: not tpc-opt %t.six.mlir --tp-pipeline="mode=1d grid=1 pp=3 microbatches=3 stage-moves=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: tp-pipeline: stage-moves=-1 needs a positive count and pp > 1
