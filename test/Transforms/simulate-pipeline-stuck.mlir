// tp-simulate on stage programs that would wait for each other forever.
// RUN: not tpc-opt %s --tp-simulate=cluster=%S/Inputs/clusters/unit.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=STUCK
//

// A receive whose send never comes: one line, not a hang.
// STUCK: error: tp-simulate: the stages' programs wait for each other forever
tp.grid @g [2]
func.func @step_stage0(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @step_stage1(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = tp.recv_start over @g from 0 tag 3 {grid_axis = 0 : i64} : tensor<4xf32>
  %y = tp.recv_wait %s : tensor<4xf32>
  return %y : tensor<4xf32>
}
