// The same model with sequence parallelism around the Megatron MLP on 2
// ranks: the residual stream is split on the sequence (a local split, no
// communication), all-gathered before the column-parallel matmul and
// reduce-scattered after the row-parallel one; an all-to-all round trip
// (sequence split -> hidden split, scaled there by a hidden-split gain ->
// sequence split) exercises that path;
// the stream is gathered again for the head.
module attributes {tp.model_type = "test"} {
  tp.grid @g [2]
  func.func @loss(%emb: tensor<128x16xf32> {tp.param = "emb", tp.init = "normal", tp.init_std = 1.0 : f64},
                  %w1: tensor<16x64xf32, #tp.dist<@g, [[], [0]]>> {tp.param = "w1", tp.init = "normal", tp.init_std = 0.25 : f64},
                  %w2: tensor<64x16xf32, #tp.dist<@g, [[0], []]>> {tp.param = "w2", tp.init = "normal", tp.init_std = 0.125 : f64},
                  %head: tensor<16x128xf32> {tp.param = "head", tp.init = "normal", tp.init_std = 0.5 : f64},
                  %gain: tensor<16xf32, #tp.dist<@g, [[0]]>> {tp.param = "gain", tp.init = "normal", tp.init_std = 1.0 : f64},
                  %tokens: tensor<2x8xi32> {tp.input = "tokens"},
                  %targets: tensor<2x8xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
    %x = tp.embedding %emb, %tokens : (tensor<128x16xf32>, tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %xs = tp.local_split %x over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32> -> tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>
    %xh = tp.all_to_all %xs over @g {source_dim = 1 : i64, target_dim = 2 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>> -> tensor<2x8x16xf32, #tp.dist<@g, [[], [], [0]]>>
    %xg = tp.mul %xh, %gain : (tensor<2x8x16xf32, #tp.dist<@g, [[], [], [0]]>>, tensor<16xf32, #tp.dist<@g, [[0]]>>) -> tensor<2x8x16xf32, #tp.dist<@g, [[], [], [0]]>>
    %xs2 = tp.all_to_all %xg over @g {source_dim = 2 : i64, target_dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [], [0]]>> -> tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>
    %xf = tp.all_gather %xs2 over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>> -> tensor<2x8x16xf32>
    %h = tp.matmul %xf, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32, #tp.dist<@g, [[], [0]]>>) -> tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>
    %a = tp.gelu %h : tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>
    %yp = tp.matmul %a, %w2 : (tensor<2x8x64xf32, #tp.dist<@g, [[], [], [0]]>>, tensor<64x16xf32, #tp.dist<@g, [[0], []]>>) -> tensor<2x8x16xf32, #tp.dist<@g, [[], [], []], partial = [0]>>
    %ys = tp.reduce_scatter %yp over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [], []], partial = [0]>> -> tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>
    %rs = tp.add %xs2, %ys : (tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>, tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>) -> tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>>
    %r = tp.all_gather %rs over @g {dim = 1 : i64, grid_axes = array<i64: 0>} : tensor<2x8x16xf32, #tp.dist<@g, [[], [0], []]>> -> tensor<2x8x16xf32>
    %logits = tp.matmul %r, %head : (tensor<2x8x16xf32>, tensor<16x128xf32>) -> tensor<2x8x128xf32>
    %l = tp.cross_entropy %logits, %targets : (tensor<2x8x128xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
