// The same model with a Megatron MLP on 2 ranks: w1 column-parallel, w2
// row-parallel, one all-reduce of the block's output.
module attributes {tp.model_type = "test"} {
  tp.grid @g [2]
  func.func @loss(%emb: tensor<128x16xf32> {tp.param = "emb", tp.init = "normal", tp.init_std = 1.0 : f64},
                  %w1: tensor<16x64xf32, #tp.dist<@g, [[], [0]]>> {tp.param = "w1", tp.init = "normal", tp.init_std = 0.25 : f64},
                  %w2: tensor<64x16xf32, #tp.dist<@g, [[0], []]>> {tp.param = "w2", tp.init = "normal", tp.init_std = 0.125 : f64},
                  %head: tensor<16x128xf32> {tp.param = "head", tp.init = "normal", tp.init_std = 0.5 : f64},
                  %gain: tensor<16xf32> {tp.param = "gain", tp.init = "normal", tp.init_std = 1.0 : f64},
                  %tokens: tensor<2x8xi32> {tp.input = "tokens"},
                  %targets: tensor<2x8xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
    %x = tp.embedding %emb, %tokens : (tensor<128x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %xg = tp.mul %x, %gain : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %h = tp.matmul %xg, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32, #tp.dist<@g, [[], [0]]>>) -> tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>
    %a = tp.gelu %h : tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>
    %yp = tp.matmul %a, %w2 : (tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>, tensor<64x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<2x8x16xf32, #tp.dist<@g, [[], [], []], partial = [0]>>
    %y = tp.all_reduce %yp over @g {grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [], []], partial = [0]>> -> tensor<2x8x16xf32>
    %r = tp.add %xg, %y : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %logits = tp.matmul %r, %head : (tensor<2x8x16xf32>, tensor<16x128xf32>) -> tensor<2x8x128xf32>
    %l = tp.cross_entropy %logits, %targets : (tensor<2x8x128xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
