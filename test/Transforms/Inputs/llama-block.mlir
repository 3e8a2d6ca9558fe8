// One LLaMA block (h 32, 4 heads, 2 kv heads, vocab 64, batch 2, seq 8) from tpc-import.
module attributes {tp.head_counts = {num_attention_heads = 4 : i64, num_key_value_heads = 2 : i64}, tp.model_type = "llama"} {
  func.func @loss(%arg0: tensor<64x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.embed_tokens.weight"}, %arg1: tensor<32xf32> {tp.init = "ones", tp.param = "model.layers.0.input_layernorm.weight"}, %arg2: tensor<32x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.self_attn.q_proj.weight"}, %arg3: tensor<16x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.self_attn.k_proj.weight"}, %arg4: tensor<16x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.self_attn.v_proj.weight"}, %arg5: tensor<32x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.self_attn.o_proj.weight"}, %arg6: tensor<32xf32> {tp.init = "ones", tp.param = "model.layers.0.post_attention_layernorm.weight"}, %arg7: tensor<64x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.mlp.gate_proj.weight"}, %arg8: tensor<64x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.mlp.up_proj.weight"}, %arg9: tensor<32x64xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "model.layers.0.mlp.down_proj.weight"}, %arg10: tensor<32xf32> {tp.init = "ones", tp.param = "model.norm.weight"}, %arg11: tensor<64x32xf32> {tp.init = "normal", tp.init_std = 2.000000e-02 : f64, tp.param = "lm_head.weight"}, %arg12: tensor<2x8xi32> {tp.input = "tokens"}, %arg13: tensor<2x8xi32> {tp.input = "targets"}) -> (tensor<f32> {tp.output = "loss"}) {
    %0 = tp.embedding %arg0, %arg12 : (tensor<64x32xf32>, tensor<2x8xi32>) -> tensor<2x8x32xf32>
    %1 = tp.rms_norm %0, %arg1 {epsilon = 1.000000e-05 : f64, tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %2 = tp.matmul %1, %arg2 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %3 = tp.reshape %2 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>) -> tensor<2x8x2x2x8xf32>
    %4 = tp.transpose %3 {permutation = array<i64: 0, 2, 3, 1, 4>, tp.layer = 0 : i64} : (tensor<2x8x2x2x8xf32>) -> tensor<2x2x2x8x8xf32>
    %5 = tp.rotary %4 {tp.layer = 0 : i64} : tensor<2x2x2x8x8xf32>
    %6 = tp.matmul %1, %arg3 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
    %7 = tp.reshape %6 {tp.layer = 0 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x1x8xf32>
    %8 = tp.transpose %7 {permutation = array<i64: 0, 2, 3, 1, 4>, tp.layer = 0 : i64} : (tensor<2x8x2x1x8xf32>) -> tensor<2x2x1x8x8xf32>
    %9 = tp.rotary %8 {tp.layer = 0 : i64} : tensor<2x2x1x8x8xf32>
    %10 = tp.matmul %1, %arg4 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
    %11 = tp.reshape %10 {tp.layer = 0 : i64} : (tensor<2x8x16xf32>) -> tensor<2x8x2x1x8xf32>
    %12 = tp.transpose %11 {permutation = array<i64: 0, 2, 3, 1, 4>, tp.layer = 0 : i64} : (tensor<2x8x2x1x8xf32>) -> tensor<2x2x1x8x8xf32>
    %13 = tp.matmul %5, %9 {alpha = 0.35355339059327373 : f64, tp.layer = 0 : i64, transpose_rhs} : (tensor<2x2x2x8x8xf32>, tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
    %14 = tp.softmax %13 {causal, tp.layer = 0 : i64} : tensor<2x2x2x8x8xf32>
    %15 = tp.matmul %14, %12 {tp.layer = 0 : i64} : (tensor<2x2x2x8x8xf32>, tensor<2x2x1x8x8xf32>) -> tensor<2x2x2x8x8xf32>
    %16 = tp.transpose %15 {permutation = array<i64: 0, 3, 1, 2, 4>, tp.layer = 0 : i64} : (tensor<2x2x2x8x8xf32>) -> tensor<2x8x2x2x8xf32>
    %17 = tp.reshape %16 {tp.layer = 0 : i64} : (tensor<2x8x2x2x8xf32>) -> tensor<2x8x32xf32>
    %18 = tp.matmul %17, %arg5 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %19 = tp.add %0, %18 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %20 = tp.rms_norm %19, %arg6 {epsilon = 1.000000e-05 : f64, tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %21 = tp.matmul %20, %arg7 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    %22 = tp.matmul %20, %arg8 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    %23 = tp.silu %21 {tp.layer = 0 : i64} : tensor<2x8x64xf32>
    %24 = tp.mul %23, %22 {tp.layer = 0 : i64} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %25 = tp.matmul %24, %arg9 {tp.layer = 0 : i64, transpose_rhs} : (tensor<2x8x64xf32>, tensor<32x64xf32>) -> tensor<2x8x32xf32>
    %26 = tp.add %19, %25 {tp.layer = 0 : i64} : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %27 = tp.rms_norm %26, %arg10 {epsilon = 1.000000e-05 : f64} : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %28 = tp.matmul %27, %arg11 {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    %29 = tp.cross_entropy %28, %arg13 : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
    return %29 : tensor<f32>
  }
}

