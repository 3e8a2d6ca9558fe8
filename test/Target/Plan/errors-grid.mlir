// A plan for a grid of 4 ranks records its grid; run without mpirun (one
// rank), tp-run refuses it with a one-line error.
// RUN: tpc-opt %s --tp-pipeline="train=false" -o %t.tpplan
// RUN: not tp-run eval %t.tpplan --data %t.none 2>&1 | FileCheck %s
// CHECK: tp-run: error: {{.*}}.tpplan: the plan's grid [2,2] has 4 ranks, but 1 is running
tp.grid @g [2, 2]
func.func @forward(%x: tensor<4xf32> {tp.param = "x", tp.init = "zeros"}) -> tensor<4xf32> {
  %0 = tp.gelu %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
