// tp-simulate replays a pipeline's stage programs together (figures by
// hand on Inputs/clusters/unit.json: 1 GFLOP/s f32, a node of 2 ranks at
// 1 GB/s and 1 us a message).
// RUN: tpc-opt %s --tp-simulate=cluster=%S/Inputs/clusters/unit.json -o /dev/null 2>&1 | FileCheck %s
//
// Stage 0: a 2 ms product, sends it (40000 bytes to rank 1: 1 us + 40 us),
// a second 2 ms product, then the send's wait (the data left at 2.041 ms).
// Stage 1 posts its receive at 0 and waits until 2.041 ms, then 2 ms of
// product. The all-reduce over the stages starts when stage 1 reaches it
// (4.041 ms) and takes 2 messages of 1 us + 4 bytes at 1 GB/s: 4.043 ms.
// Stage 0 waited 0.041 ms of it (1.0 %), stage 1 2.041 ms (50.5 %).
// CHECK: remark: @step on unit: 4.043 ms per run (pipeline of 2 stages; stage 0: done at 4.043 ms, idle 1.0 %; stage 1: done at 4.043 ms, idle 50.5 %)
// CHECK: remark: @step_stage0 on unit: 4.043 ms per run (products 4.000 ms, 4.000e+06 flops; other kernels 0.000 ms; exchanges 0.043 ms, 0.043 ms exposed)
// CHECK: remark: @step_stage1 on unit: 4.043 ms per run (products 2.000 ms, 2.000e+06 flops; other kernels 0.000 ms; exchanges 0.002 ms, 2.043 ms exposed)
//
// Both ranks on one device ("devices": 1). With "cores": 1 a rank computing
// alone gets all of it: stage 0's first product takes 2 ms; its second
// runs alone until stage 1's starts at 2.041 ms, then both at half speed:
// stage 0 is done at 2.041 + 2 x 1.959 = 5.959 ms, stage 1 has 0.041 ms
// of work left, alone again: 6.000 ms, and the all-reduce 6.002 ms.
// RUN: sed 's/"source"/"devices": 1, "source"/; s/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "cores": 1/' %S/Inputs/clusters/unit.json > %t.one-core.json
// RUN: tpc-opt %s --tp-simulate=cluster=%t.one-core.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=ONECORE
// ONECORE: remark: @step on unit: 6.002 ms per run (pipeline of 2 stages; stage 0: done at 6.002 ms, idle 0.7 %; stage 1: done at 6.002 ms, idle 34.0 %)
// With "cores": 2 each rank uses at most half of it, busy or not: every
// product takes 4 ms, as without sharing at twice the time.
// RUN: sed 's/"source"/"devices": 1, "source"/; s/"memory_bandwidth": 1e9/"memory_bandwidth": 1e9, "cores": 2/' %S/Inputs/clusters/unit.json > %t.two-cores.json
// RUN: tpc-opt %s --tp-simulate=cluster=%t.two-cores.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=TWOCORES
// TWOCORES: remark: @step on unit: 8.043 ms per run (pipeline of 2 stages; stage 0: done at 8.043 ms, idle 0.5 %; stage 1: done at 8.043 ms, idle 50.2 %)
tp.grid @g [2]
func.func @step_stage0(%x: tensor<100x100xf32>, %l: tensor<1xf32>) -> (tensor<100x100xf32>, tensor<1xf32>) {
  %y = tp.matmul %x, %x : (tensor<100x100xf32>, tensor<100x100xf32>) -> tensor<100x100xf32>
  tp.send_start %y over @g to 1 tag 0 {grid_axis = 0 : i64} : tensor<100x100xf32>
  %z = tp.matmul %x, %x : (tensor<100x100xf32>, tensor<100x100xf32>) -> tensor<100x100xf32>
  tp.send_wait %y over @g to 1 tag 0 {grid_axis = 0 : i64} : tensor<100x100xf32>
  %r = tp.all_reduce %l over @g {grid_axes = array<i64: 0>} : tensor<1xf32> -> tensor<1xf32>
  return %z, %r : tensor<100x100xf32>, tensor<1xf32>
}
func.func @step_stage1(%x: tensor<100x100xf32>, %l: tensor<1xf32>) -> (tensor<100x100xf32>, tensor<1xf32>) {
  %s = tp.recv_start over @g from 0 tag 0 {grid_axis = 0 : i64} : tensor<100x100xf32>
  %y = tp.recv_wait %s : tensor<100x100xf32>
  %z = tp.matmul %y, %x : (tensor<100x100xf32>, tensor<100x100xf32>) -> tensor<100x100xf32>
  %r = tp.all_reduce %l over @g {grid_axes = array<i64: 0>} : tensor<1xf32> -> tensor<1xf32>
  return %z, %r : tensor<100x100xf32>, tensor<1xf32>
}

