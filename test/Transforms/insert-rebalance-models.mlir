// Which dimensions of an imported GPT-2 and LLaMA block become rebalance
// points under 1D tensor parallelism, with their blocks and capacity.
//
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="mode=1d grid=2 rebalance=true rebalance-granularity=16" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=GPT2
// GPT-2 (h 32, 4 heads of 8, MLP 128) on 2 ranks: heads (one per block, 2
// per rank, capacity 3) and MLP features (16 per block, 4 per rank,
// capacity 6). The vocabulary-parallel embedding cannot move rows, and
// @gradients, which gathers whole gradients, runs only at the even split.
// GPT2-DAG: remark: @gradients moves no blocks of parameter 'transformer.h.0.attn.c_attn.bias' dimension 1 (it runs only while they are evenly spread): 'tp.all_gather' exchanges blocks between ranks
// GPT2-DAG: remark: parameter 'transformer.wte.weight' dimension 0 is no rebalance point: '@loss': 'tp.embedding' exchanges statistics between ranks
// GPT2-DAG: remark: rebalance point @transformer.h.0.attn: 4 blocks over axis 0 (2 per rank, capacity 3), 3 parameter dimensions
// GPT2-DAG: remark: rebalance point @transformer.h.0.mlp: 8 blocks over axis 0 (4 per rank, capacity 6), 3 parameter dimensions
//
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="mode=1d grid=2 seq-parallel=true rebalance=true rebalance-granularity=16" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=GPT2SP
// Sequence parallelism with collective matmuls (its default): the rings that
// replace the gathers and reduce-scatters pass sequence blocks, never
// rebalance blocks, and a ring's finished reduce-scatter or gather is a
// rank's shard or the whole again, so the same points stay.
// GPT2SP-NOT: @train_step moves no blocks
// GPT2SP-DAG: remark: rebalance point @transformer.h.0.attn: 4 blocks over axis 0 (2 per rank, capacity 3), 3 parameter dimensions
// GPT2SP-DAG: remark: rebalance point @transformer.h.0.mlp: 8 blocks over axis 0 (4 per rank, capacity 6), 3 parameter dimensions
//
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir --mlir-print-ir-after=tp-insert-rebalance \
// RUN:   --tp-pipeline="mode=1d grid=2 rebalance=true rebalance-granularity=16 rebalance-headroom=1" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=IR
// Headroom 1: a rank may hold all blocks. Weights, moments and activations of
// the points are sized for them; AdamW updates the capacity-sized shards.
// IR: tp.rebalance_point @transformer.h.0.attn over @tp axis 0 blocks 4 capacity 4
// IR-NEXT: tp.rebalance_point @transformer.h.0.mlp over @tp axis 0 blocks 8 capacity 8
// IR-LABEL: func.func @train_step
// IR-SAME: tensor<32x3x32xf32> {{{.*}}tp.param = "transformer.h.0.attn.c_attn.weight", tp.rebalance_dims = [unit, unit, @transformer.h.0.attn]}
// IR-SAME: tensor<32x128xf32> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.weight", tp.rebalance_dims = [unit, @transformer.h.0.mlp]}
// IR-SAME: tensor<32x128xf32> {{{.*}}tp.param = "transformer.h.0.mlp.c_fc.weight", tp.rebalance_dims = [unit, @transformer.h.0.mlp], tp.state = "exp_avg"}
// IR: tp.attention {{.*}}tp.rebalance_dims = {{\[\[}}unit, @transformer.h.0.attn, unit, unit], [unit, @transformer.h.0.attn, unit]]} : (tensor<2x4x8x8xf32>,
// IR: tp.gelu_grad {{.*}} -> tensor<2x8x128xf32>
// IR: tp.adamw {{.*}} : (tensor<128x32xf32>, tensor<128x32xf32>, tensor<128x32xf32>, tensor<128x32xf32>,
//
// RUN: tpc-opt %S/Inputs/llama-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="mode=1d grid=2 rebalance=true rebalance-granularity=16" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=LLAMA
// LLaMA (4 query heads sharing 2 key/value heads) on 2 ranks: one key/value
// head per rank, which a block would have to be, so attention stays put;
// the gated MLP (gate, up, down) is one point.
// LLAMA-DAG: remark: parameter 'model.layers.0.self_attn.q_proj.weight' dimension 0 is no rebalance point: '@loss': 'tp.attention' combines the blocks with operand 1, which differs between ranks
// LLAMA-DAG: remark: rebalance point @model.layers.0.mlp: 4 blocks over axis 0 (2 per rank, capacity 3), 3 parameter dimensions
//
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="mode=2d grid=2x2 rebalance=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=TWOD
// 2D: the blocks split over axis 1 move: the SUMMA rings and gathers over
// axis 0 keep their dimension, and the ranks of one axis-1 position hold
// the same blocks. A split over axis 0 reaches those rings along its own
// dimension and cannot.
// TWOD-DAG: remark: parameter 'transformer.h.0.mlp.c_fc.weight' dimension 0 is no rebalance point: '@loss': 'tp.ring_shift_wait' exchanges blocks between ranks, whose shapes must agree
// TWOD-DAG: remark: rebalance point @transformer.h.0.attn: 4 blocks over axis 1 (2 per rank, capacity 3), 3 parameter dimensions, 162 tensor dimensions
// TWOD-DAG: remark: rebalance point @transformer.h.0.mlp: 2 blocks over axis 1 (1 per rank, capacity 2), 3 parameter dimensions, 61 tensor dimensions
//
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="rebalance=true" 2>&1 | FileCheck %s --check-prefix=NOMODE
// NOMODE: tp-pipeline: rebalance=true needs a mode, e.g. mode=1d
// RUN: not tpc-opt %S/Inputs/gpt2-block.mlir -o /dev/null \
// RUN:   --tp-pipeline="mode=1d grid=2 rebalance-headroom=1" 2>&1 | FileCheck %s --check-prefix=NOTON
// NOTON: tp-pipeline: rebalance-granularity and rebalance-headroom need rebalance=true
//
// The plan (format 1.6) carries the points; a rebalanced parameter keeps its
// whole shape, its split and which point each dimension holds; a tensor holding
// blocks is sized for the capacity and names its point; @gradients views the
// same parameter at the even split.
// RUN: tpc-opt %S/Inputs/gpt2-block.mlir -o %t.tpplan \
// RUN:   --tp-pipeline="mode=1d grid=2 rebalance=true rebalance-granularity=16"
// RUN: env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe tp-run %t.tpplan --print-plan > %t.json
// RUN: %json %t.json version rebalance_points params.10 params.11 programs.1.name programs.1.tensors.10 programs.2.name programs.2.tensors.10 | FileCheck %s --check-prefix=PLAN
// PLAN: version = "1.15"
// PLAN{LITERAL}: rebalance_points = [{"name": "transformer.h.0.attn", "axis": 0, "blocks": 4, "capacity": 3}, {"name": "transformer.h.0.mlp", "axis": 0, "blocks": 8, "capacity": 6}]
// PLAN{LITERAL}: params.10 = {"name": "transformer.h.0.mlp.c_fc.weight", "dtype": "F32", "shape": [32, 128], "split": [[], [0]], "rebalance_dims": [-1, 1], "init": "Normal", "init_std": 0.02}
// PLAN{LITERAL}: params.11 = {"name": "transformer.h.0.mlp.c_fc.bias", "dtype": "F32", "shape": [128], "split": [[0]], "rebalance_dims": [1], "init": "Zeros"}
// PLAN: programs.1.name = "gradients"
// PLAN{LITERAL}: programs.1.tensors.10 = {"id": 10, "dtype": "F32", "shape": [32, 64], "storage": "Param", "index": 10}
// PLAN: programs.2.name = "train_step"
// PLAN{LITERAL}: programs.2.tensors.10 = {"id": 10, "dtype": "F32", "shape": [32, 96], "storage": "Param", "rebalance_dims": [-1, 1], "index": 10}
