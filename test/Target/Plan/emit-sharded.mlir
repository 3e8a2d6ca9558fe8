// A sharded parameter keeps its global shape and its split in the plan;
// tensors are local; collectives carry their grid axes and dimension.
// RUN: tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan
// RUN: not tp-run eval %t.tpplan --data %t.none 2>&1 | FileCheck %s --check-prefix=WORLD
// WORLD: has 2 ranks, but 1 is running
// RUN: env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe tp-run %t.tpplan --print-plan > %t.json
// RUN: %json %t.json grid params.0 programs.0.tensors.0 programs.0.steps.1 | FileCheck %s
// CHECK: grid = [2]
// CHECK{LITERAL}: params.0 = {"name": "w", "dtype": "F32", "shape": [8, 16], "split": [[], [0]], "init": "Zeros"}
// CHECK: programs.0.tensors.0 = {"id": 0, "dtype": "F32", "shape": [8, 8], "storage": "Param", "index": 0}
// CHECK: programs.0.steps.1 = {"op": "AllGather", "operands": [{{[0-9]+}}], "results": [{{[0-9]+}}], "dim": 1, "ints": [0]
tp.grid @g [2]
func.func @forward(%w: tensor<8x16xf32, #tp.dist<@g, [[], [0]]>> {tp.param = "w", tp.init = "zeros"}) -> tensor<8x16xf32> {
  %0 = tp.gelu %w : tensor<8x16xf32, #tp.dist<@g, [[], [0]]>>
  %1 = tp.all_gather %0 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], [0]]>> -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
