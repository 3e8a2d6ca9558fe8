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

