// One GPT-2 transformer block (pre-norm attention + GELU MLP) followed by a
// vocabulary projection and the mean cross-entropy loss, in the tp dialect's
// global view: batch 2, sequence 16, hidden 64, 4 heads of 16, MLP 256,
// vocabulary 128. Weights use GPT-2's Conv1D layout ([in, out]); the Q, K
// and V projections are separate here (the importer handles GPT-2's fused
// c_attn).
//
// Run it through the compiler driver (the README's main command does this):
//   tpc-opt examples/gpt2_block.mlir --tp-print-sharding-rules

func.func @block_loss(
    %x: tensor<2x16x64xf32>,
    %ln1_g: tensor<64xf32>, %ln1_b: tensor<64xf32>,
    %w_q: tensor<64x64xf32>, %b_q: tensor<64xf32>,
    %w_k: tensor<64x64xf32>, %b_k: tensor<64xf32>,
    %w_v: tensor<64x64xf32>, %b_v: tensor<64xf32>,
    %w_o: tensor<64x64xf32>, %b_o: tensor<64xf32>,
    %ln2_g: tensor<64xf32>, %ln2_b: tensor<64xf32>,
    %w_fc: tensor<64x256xf32>, %b_fc: tensor<256xf32>,
    %w_proj: tensor<256x64xf32>, %b_proj: tensor<64xf32>,
    %wte: tensor<128x64xf32>, %targets: tensor<2x16xi32>) -> tensor<f32> {
  // Causal self-attention: [B, S, H] -> [B*heads, S, head_dim] per projection.
  %h = tp.layer_norm %x, %ln1_g, %ln1_b : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %q0 = tp.matmul %h, %w_q : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %q1 = tp.add %q0, %b_q : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %q2 = tp.reshape %q1 : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %q3 = tp.transpose %q2 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %q = tp.reshape %q3 : (tensor<2x4x16x16xf32>) -> tensor<8x16x16xf32>
  %k0 = tp.matmul %h, %w_k : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %k1 = tp.add %k0, %b_k : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %k2 = tp.reshape %k1 : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %k3 = tp.transpose %k2 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %k = tp.reshape %k3 : (tensor<2x4x16x16xf32>) -> tensor<8x16x16xf32>
  %v0 = tp.matmul %h, %w_v : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %v1 = tp.add %v0, %b_v : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %v2 = tp.reshape %v1 : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %v3 = tp.transpose %v2 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %v = tp.reshape %v3 : (tensor<2x4x16x16xf32>) -> tensor<8x16x16xf32>
  %scores0 = tp.matmul %q, %k {transpose_rhs} : (tensor<8x16x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %scores = tp.scale %scores0, 0.25 : tensor<8x16x16xf32>
  %probs = tp.softmax %scores {causal} : tensor<8x16x16xf32>
  %ctx0 = tp.matmul %probs, %v : (tensor<8x16x16xf32>, tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %ctx1 = tp.reshape %ctx0 : (tensor<8x16x16xf32>) -> tensor<2x4x16x16xf32>
  %ctx2 = tp.transpose %ctx1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x16xf32>) -> tensor<2x16x4x16xf32>
  %ctx = tp.reshape %ctx2 : (tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32>
  %attn0 = tp.matmul %ctx, %w_o : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %attn = tp.add %attn0, %b_o : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %x1 = tp.add %x, %attn : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // MLP.
  %h2 = tp.layer_norm %x1, %ln2_g, %ln2_b : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %fc0 = tp.matmul %h2, %w_fc : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  %fc1 = tp.add %fc0, %b_fc : (tensor<2x16x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
  %act = tp.gelu %fc1 : tensor<2x16x256xf32>
  %proj0 = tp.matmul %act, %w_proj : (tensor<2x16x256xf32>, tensor<256x64xf32>) -> tensor<2x16x64xf32>
  %proj = tp.add %proj0, %b_proj : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %x2 = tp.add %x1, %proj : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // Tied LM head and loss.
  %logits = tp.matmul %x2, %wte {transpose_rhs} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
  %loss = tp.cross_entropy %logits, %targets : (tensor<2x16x128xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
