// The fused attention kernels against a naive double-precision reference of
// softmax(alpha q k^T) v and its gradients: causal and not, grouped-query
// broadcast, more queries than one block, value features unlike the key's,
// and mixed precision (the same roundings as the unfused program's matmuls).
#include "CpuKernelsTestSupport.h"

#include <limits>

namespace tpc::runtime::cpu::test {
namespace {

struct AttentionCase {
  Dims batch, keyBatch;
  int64_t queries, keys, headDim, valueDim;
  bool causal;
  float alpha;
  Rounding rounding = Rounding::None;

  AttentionShape shape() const {
    AttentionShape s;
    s.batch = batch;
    s.keyBatch = keyBatch;
    s.queries = queries;
    s.keys = keys;
    s.headDim = headDim;
    s.valueDim = valueDim;
    s.causal = causal;
    s.alpha = alpha;
    s.rounding = rounding;
    return s;
  }
};

struct AttentionValues {
  std::vector<double> result, logSumExp, queryGrad, keyGrad, valueGrad;
};

std::vector<float> roundedCopy(Rounding rounding, std::vector<float> v) {
  if (rounding != Rounding::None)
    round(rounding, v.data(), v.data(), int64_t(v.size()));
  return v;
}

double roundedValue(Rounding rounding, double x) {
  float f = static_cast<float>(x);
  if (rounding != Rounding::None)
    round(rounding, &f, &f, 1);
  return rounding == Rounding::None ? x : double(f);
}

/// Head by head in double, rounding where the kernel does (`rounding`).
AttentionValues reference(const AttentionCase &c, Rounding rounding,
                          const std::vector<float> &queryIn,
                          const std::vector<float> &keyIn,
                          const std::vector<float> &valueIn,
                          const std::vector<float> &resultGradIn) {
  const std::vector<float> q = roundedCopy(rounding, queryIn),
                           k = roundedCopy(rounding, keyIn),
                           v = roundedCopy(rounding, valueIn),
                           dy = roundedCopy(rounding, resultGradIn);
  const int64_t heads = numel(c.batch), keyHeads = numel(c.keyBatch);
  const int64_t sq = c.queries, sk = c.keys, d = c.headDim, dv = c.valueDim;
  AttentionValues out;
  out.result.assign(size_t(heads * sq * dv), 0.0);
  out.logSumExp.assign(size_t(heads * sq), 0.0);
  out.queryGrad.assign(size_t(heads * sq * d), 0.0);
  out.keyGrad.assign(size_t(keyHeads * sk * d), 0.0);
  out.valueGrad.assign(size_t(keyHeads * sk * dv), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    // The key head: the query head's coordinates, 0 where broadcast.
    Dims coords = unravel(h, c.batch);
    int64_t kh = 0;
    for (size_t i = 0; i < coords.size(); ++i)
      kh = kh * c.keyBatch[i] + (c.keyBatch[i] == 1 ? 0 : coords[i]);
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t visible = c.causal ? i + 1 : sk;
      std::vector<double> p(static_cast<size_t>(visible)),
          dp(static_cast<size_t>(visible));
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        double s = 0;
        for (int64_t f = 0; f < d; ++f)
          s += double(q[size_t((h * sq + i) * d + f)]) *
               double(k[size_t((kh * sk + j) * d + f)]);
        p[size_t(j)] = double(c.alpha) * s;
        max = std::max(max, p[size_t(j)]);
      }
      double total = 0;
      for (double &x : p)
        total += (x = std::exp(x - max));
      for (double &x : p)
        x /= total;
      out.logSumExp[size_t(h * sq + i)] = max + std::log(total);
      double *result = out.result.data() + (h * sq + i) * dv;
      for (int64_t j = 0; j < visible; ++j)
        for (int64_t f = 0; f < dv; ++f)
          result[f] += roundedValue(rounding, p[size_t(j)]) *
                       double(v[size_t((kh * sk + j) * dv + f)]);
      // The softmax backward's sum(dp p), formed as dy . result like the
      // kernels (equal without rounding).
      double dot = 0;
      for (int64_t f = 0; f < dv; ++f)
        dot += double(resultGradIn[size_t((h * sq + i) * dv + f)]) * result[f];
      for (int64_t j = 0; j < visible; ++j) {
        double g = 0;
        for (int64_t f = 0; f < dv; ++f)
          g += double(dy[size_t((h * sq + i) * dv + f)]) *
               double(v[size_t((kh * sk + j) * dv + f)]);
        dp[size_t(j)] = g;
      }
      for (int64_t j = 0; j < visible; ++j) {
        const double pr = roundedValue(rounding, p[size_t(j)]);
        const double ds =
            roundedValue(rounding, p[size_t(j)] * (dp[size_t(j)] - dot));
        for (int64_t f = 0; f < dv; ++f)
          out.valueGrad[size_t((kh * sk + j) * dv + f)] +=
              pr * double(dy[size_t((h * sq + i) * dv + f)]);
        for (int64_t f = 0; f < d; ++f) {
          out.queryGrad[size_t((h * sq + i) * d + f)] +=
              double(c.alpha) * ds * double(k[size_t((kh * sk + j) * d + f)]);
          out.keyGrad[size_t((kh * sk + j) * d + f)] +=
              double(c.alpha) * ds * double(q[size_t((h * sq + i) * d + f)]);
        }
      }
    }
  }
  return out;
}

struct AttentionRun {
  std::vector<float> result, logSumExp, queryGrad, keyGrad, valueGrad;
  std::vector<float> query, key, value, resultGrad;
};

AttentionRun runKernels(const AttentionCase &c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t heads = numel(c.batch), keyHeads = numel(c.keyBatch);
  AttentionRun run;
  run.query = randomVector(heads * c.queries * c.headDim, rng, -1.5f, 1.5f);
  run.key = randomVector(keyHeads * c.keys * c.headDim, rng, -1.5f, 1.5f);
  run.value = randomVector(keyHeads * c.keys * c.valueDim, rng);
  run.resultGrad = randomVector(heads * c.queries * c.valueDim, rng);
  // NaN-poisoned: every element must be written.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  run.result.assign(size_t(heads * c.queries * c.valueDim), nan);
  run.logSumExp.assign(size_t(heads * c.queries), nan);
  run.queryGrad.assign(run.query.size(), nan);
  run.keyGrad.assign(run.key.size(), nan);
  run.valueGrad.assign(run.value.size(), nan);
  const AttentionShape shape = c.shape();
  attention(run.query.data(), run.key.data(), run.value.data(), shape,
            run.result.data(), run.logSumExp.data());
  attentionGrad(run.resultGrad.data(), run.query.data(), run.key.data(),
                run.value.data(), run.result.data(), run.logSumExp.data(),
                shape, run.queryGrad.data(), run.keyGrad.data(),
                run.valueGrad.data());
  return run;
}

void expectMatchesReference(const AttentionCase &c, double tolerance) {
  AttentionRun run = runKernels(c, 11);
  AttentionValues want =
      reference(c, c.rounding, run.query, run.key, run.value, run.resultGrad);
  EXPECT_TRUE(closeToMax(run.result, want.result, tolerance)) << "result";
  EXPECT_TRUE(closeToMax(run.logSumExp, want.logSumExp, tolerance))
      << "logsumexp";
  EXPECT_TRUE(closeToMax(run.queryGrad, want.queryGrad, tolerance))
      << "query grad";
  EXPECT_TRUE(closeToMax(run.keyGrad, want.keyGrad, tolerance)) << "key grad";
  EXPECT_TRUE(closeToMax(run.valueGrad, want.valueGrad, tolerance))
      << "value grad";
}

TEST(CpuAttention, CausalHeadsMatchTheReference) {
  expectMatchesReference({{2, 3}, {2, 3}, 5, 5, 8, 8, true, 0.35f}, 1e-5);
}

TEST(CpuAttention, CausalAcrossQueryBlocks) {
  // More queries than one block of the kernel (128): later blocks see more
  // keys than earlier ones.
  expectMatchesReference({{1, 2}, {1, 2}, 131, 131, 8, 8, true, 0.3f}, 1e-5);
}

TEST(CpuAttention, GroupedQueryHeadsSumIntoTheirKeyHead) {
  // [batch, kv heads, group]: three query heads share each key/value head;
  // value features differ from the key's.
  expectMatchesReference({{2, 2, 3}, {2, 2, 1}, 7, 7, 6, 5, true, 0.37f}, 1e-5);
}

TEST(CpuAttention, UnmaskedWithMoreKeysThanQueries) {
  expectMatchesReference({{3}, {3}, 4, 9, 5, 3, false, 0.5f}, 1e-5);
}

/// Mean of |got - want| over the largest |want|.
double meanError(const std::vector<float> &got,
                 const std::vector<double> &want) {
  double sum = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    sum += std::abs(double(got[i]) - want[i]);
    scale = std::max(scale, std::abs(want[i]));
  }
  return sum / double(got.size()) / scale;
}

TEST(CpuAttention, MixedPrecisionRoundsEveryProductsOperands) {
  // Against the reference that rounds where the unfused program's matmuls
  // do, the kernel agrees to accumulation order (a rare tie may round the
  // other way); against the unrounded one it is off by the rounding, by far
  // more.
  for (Rounding rounding : {Rounding::BF16, Rounding::TF32}) {
    AttentionCase c{{2, 2, 3}, {2, 2, 1}, 40,    40,      16,
                    16,        true,      0.25f, rounding};
    AttentionRun run = runKernels(c, 5);
    AttentionValues rounded =
        reference(c, rounding, run.query, run.key, run.value, run.resultGrad);
    AttentionValues exact = reference(c, Rounding::None, run.query, run.key,
                                      run.value, run.resultGrad);
    const double bits = rounding == Rounding::BF16 ? 8 : 11;
    const double unit = std::ldexp(1.0, -int(bits));
    for (auto [got, want, wantExact, name] :
         {std::tuple{&run.result, &rounded.result, &exact.result, "result"},
          std::tuple{&run.queryGrad, &rounded.queryGrad, &exact.queryGrad,
                     "query grad"},
          std::tuple{&run.keyGrad, &rounded.keyGrad, &exact.keyGrad,
                     "key grad"},
          std::tuple{&run.valueGrad, &rounded.valueGrad, &exact.valueGrad,
                     "value grad"}}) {
      const double toRounded = meanError(*got, *want),
                   toExact = meanError(*got, *wantExact);
      EXPECT_LT(toRounded, unit / 50) << name;
      EXPECT_GT(toExact, 10 * toRounded) << name;
    }
  }
}

TEST(CpuAttention, AtPositionsMatchesTheCausalRowsOfTheWholeSequence) {
  // A generation step: each batch row's queries at its own positions
  // against a KV cache whose rows past them hold NaN (never to be read) give
  // the rows of causal attention over the whole sequence.
  std::mt19937 rng(23);
  const int64_t batch = 2, heads = 3, seq = 9, d = 8, cache = 12, step = 3;
  const int64_t firstOf[batch] = {4, 2};
  AttentionCase whole{
      {batch, heads}, {batch, heads}, seq, seq, d, d, true, 0.3f};
  std::vector<float> q = randomVector(batch * heads * seq * d, rng),
                     k = randomVector(batch * heads * seq * d, rng),
                     v = randomVector(batch * heads * seq * d, rng);
  std::vector<float> wholeOut(q.size()), wholeLse(size_t(batch * heads * seq));
  attention(q.data(), k.data(), v.data(), whole.shape(), wholeOut.data(),
            wholeLse.data());

  std::vector<float> stepQ, kc(size_t(batch * heads * cache * d),
                               std::numeric_limits<float>::quiet_NaN());
  std::vector<float> vc = kc;
  std::vector<double> want, wantLse;
  std::vector<int32_t> positions;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t t = 0; t < step; ++t)
      positions.push_back(int32_t(firstOf[n] + t));
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t head = n * heads + h;
      // Keys and values up to the last position this row's queries see.
      for (int64_t j = 0; j < firstOf[n] + step; ++j)
        for (int64_t i = 0; i < d; ++i) {
          kc[size_t((head * cache + j) * d + i)] =
              k[size_t((head * seq + j) * d + i)];
          vc[size_t((head * cache + j) * d + i)] =
              v[size_t((head * seq + j) * d + i)];
        }
      for (int64_t t = 0; t < step; ++t) {
        const int64_t row = firstOf[n] + t;
        for (int64_t i = 0; i < d; ++i) {
          stepQ.push_back(q[size_t((head * seq + row) * d + i)]);
          want.push_back(wholeOut[size_t((head * seq + row) * d + i)]);
        }
        wantLse.push_back(wholeLse[size_t(head * seq + row)]);
      }
    }
  AttentionCase generation{
      {batch, heads}, {batch, heads}, step, cache, d, d, false, 0.3f};
  AttentionShape shape = generation.shape();
  shape.positions = positions.data();
  shape.positionRows = batch;
  std::vector<float> out(stepQ.size()), lse(size_t(batch * heads * step));
  attention(stepQ.data(), kc.data(), vc.data(), shape, out.data(), lse.data());
  EXPECT_TRUE(closeToMax(out, want, 1e-5));
  EXPECT_TRUE(closeToMax(lse, wantLse, 1e-5));

  positions[1] = int32_t(cache);
  expectRuntimeError(
      [&] {
        attention(stepQ.data(), kc.data(), vc.data(), shape, out.data(),
                  lse.data());
      },
      "position 12 is outside the KV cache of 12 positions");
}

TEST(CpuAttention, RejectsAKeyThatDoesNotBroadcast) {
  AttentionCase c{{2, 3}, {2, 2}, 4, 4, 4, 4, true, 1.0f};
  std::vector<float> q(2 * 3 * 16), k(2 * 2 * 16), v(2 * 2 * 16),
      out(2 * 3 * 16), lse(2 * 3 * 4);
  expectRuntimeError(
      [&] {
        attention(q.data(), k.data(), v.data(), c.shape(), out.data(),
                  lse.data());
      },
      "attention: key batch dim 1 is neither query's nor 1");
}

} // namespace
} // namespace tpc::runtime::cpu::test
