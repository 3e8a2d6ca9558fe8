// RUN: tpc-opt %s --tp-report-communication --mlir-print-op-on-diagnostic=false -o /dev/null 2>&1 | FileCheck %s

// A Megatron MLP on 2 ranks: column-parallel then row-parallel, one
// all-reduce of the [8, 16] f32 output: 2 (t-1)/t * 512 bytes = 512 bytes.
// CHECK: remark: @{{[a-z_0-9]+}} communication per rank: all_reduce 512 bytes (1 calls), total 512 bytes
// With sequence parallelism the same volume splits into an all-gather of
// the sequence-split input and a reduce-scatter of the output: 256 + 256.
// CHECK: remark: @{{[a-z_0-9]+}} communication per rank: all_gather 256 bytes (1 calls), reduce_scatter 256 bytes (1 calls), total 512 bytes
// A vocabulary-parallel cross-entropy gathers 3 floats per token from the
// other rank: (2-1) * 3 * 16 tokens * 4 bytes.
// CHECK: remark: @{{[a-z_0-9]+}} communication per rank: all_gather 192 bytes (1 calls), total 192 bytes

tp.grid @g [2]

func.func @mlp(%x: tensor<8x16xf32>, %w1: tensor<16x32xf32, #tp.dist<@g, [[], [0]]>>,
               %w2: tensor<32x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<8x16xf32> {
  %h = tp.matmul %x, %w1 : (tensor<8x16xf32>, tensor<16x32xf32, #tp.dist<@g, [[], [0]]>>) -> tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>
  %a = tp.gelu %h : tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>
  %y = tp.matmul %a, %w2 : (tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>, tensor<32x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>
  %r = tp.all_reduce %y over @g {grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

func.func @mlp_sequence_parallel(%x: tensor<8x16xf32, #tp.dist<@g, [[0], []]>>,
                                 %w1: tensor<16x32xf32, #tp.dist<@g, [[], [0]]>>,
                                 %w2: tensor<32x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>> {
  %xf = tp.all_gather %x over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[0], []]>> -> tensor<8x16xf32>
  %h = tp.matmul %xf, %w1 : (tensor<8x16xf32>, tensor<16x32xf32, #tp.dist<@g, [[], [0]]>>) -> tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>
  %a = tp.gelu %h : tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>
  %y = tp.matmul %a, %w2 : (tensor<8x32xf32, #tp.dist<@g, [[], [0]]>>, tensor<32x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>>
  %r = tp.reduce_scatter %y over @g {dim = 0 : i64, grid_axes = array<i64: 0>} : tensor<8x16xf32, #tp.dist<@g, [[], []], partial = [0]>> -> tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
  return %r : tensor<8x16xf32, #tp.dist<@g, [[0], []]>>
}

func.func @vocab_parallel_loss(%logits: tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>,
                               %targets: tensor<2x8xi32>) -> tensor<f32> {
  %l = tp.cross_entropy %logits, %targets : (tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>, tensor<2x8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
