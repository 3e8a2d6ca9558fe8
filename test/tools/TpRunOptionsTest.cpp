// tp-run's command line, parsed directly: the subcommands, the flat form of
// earlier releases, and the list of options the ranks agree on.

#include "Options.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

using namespace tpc::tools;

namespace {
/// argv for `args` (the program name first); the strings outlive the call.
struct Argv {
  explicit Argv(std::vector<std::string> args) : args(std::move(args)) {
    for (std::string &arg : this->args)
      pointers.push_back(arg.data());
  }
  int argc() { return int(pointers.size()); }
  char **argv() { return pointers.data(); }
  std::vector<std::string> args;
  std::vector<char *> pointers;
};

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tp-run");
  Argv argv(std::move(args));
  return parseArgs(argv.argc(), argv.argv());
}

std::vector<std::string> form(std::vector<std::string> args) {
  args.insert(args.begin(), "tp-run");
  Argv argv(std::move(args));
  return subcommandForm(argv.argc(), argv.argv());
}

std::string agreedValue(const Options &o, const std::string &name) {
  for (const auto &[option, value] : o.agreed)
    if (option == name)
      return value;
  return "<absent>";
}
} // namespace

TEST(TpRunOptions, TheFlatFormIsTheSubcommandItNames) {
  using V = std::vector<std::string>;
  EXPECT_EQ(form({"m.tpplan", "--data", "t", "--steps", "3"}),
            (V{"tp-run", "train", "m.tpplan", "--data", "t", "--steps", "3"}));
  EXPECT_EQ(form({"m.tpplan", "--generate=4", "--prompt", "a"}),
            (V{"tp-run", "generate", "m.tpplan", "--max-new-tokens=4",
               "--prompt", "a"}));
  EXPECT_EQ(form({"m.tpplan", "--print-plan"}),
            (V{"tp-run", "inspect", "m.tpplan"}));
  EXPECT_EQ(form({"m.tpplan", "--data", "t"}),
            (V{"tp-run", "eval", "m.tpplan", "--data", "t"}));
  EXPECT_EQ(form({"train", "m.tpplan", "--steps", "3"}),
            (V{"tp-run", "train", "m.tpplan", "--steps", "3"}));
}

TEST(TpRunOptions, FlatAndSubcommandSpellingsParseAlike) {
  const Options flat =
      parse({"m.tpplan", "--data", "t.tokens", "--steps", "7", "--lr", "2e-3",
             "--warmup", "3", "--clip", "0.5"});
  const Options sub =
      parse({"train", "m.tpplan", "--data", "t.tokens", "--steps", "7", "--lr",
             "2e-3", "--warmup", "3", "--clip", "0.5"});
  for (const Options *o : {&flat, &sub}) {
    EXPECT_EQ(o->plan, "m.tpplan");
    EXPECT_EQ(o->steps, 7);
    EXPECT_EQ(o->schedule.hyperparameters(o->steps),
              (std::array<float, 5>{2e-3f, 2e-4f, 3.0f, 7.0f, 0.5f}));
  }
  EXPECT_EQ(flat.agreed, sub.agreed);
  const Options generate =
      parse({"m.tpplan", "--generate", "5", "--prompt", "hi", "--top-k", "3"});
  EXPECT_EQ(generate.generate, 5);
  EXPECT_EQ(generate.sampling.topK, 3);
  EXPECT_TRUE(parse({"inspect", "m.tpplan"}).inspect);
}

// Every option the subcommand knows is agreed, by value or by presence,
// except each rank's thread count: a new option cannot drop out.
TEST(TpRunOptions, EveryOptionIsAgreed) {
  const Options o =
      parse({"train", "m.tpplan", "--data", "t.tokens", "--steps", "2",
             "--threads", "1", "--metrics", "m.json", "--rebalance", "auto"});
  EXPECT_EQ(agreedValue(o, "the subcommand"), "train");
  EXPECT_EQ(agreedValue(o, "--steps"), "1:2;");
  EXPECT_EQ(agreedValue(o, "--rebalance"), "4:auto;");
  EXPECT_EQ(agreedValue(o, "--metrics"), "given");
  EXPECT_EQ(agreedValue(o, "--export"), "not given");
  EXPECT_EQ(agreedValue(o, "--threads"), "<absent>");
  std::set<std::string> names;
  for (const auto &[name, value] : o.agreed)
    names.insert(name);
  for (const char *name :
       {"--lr", "--min-lr", "--warmup", "--decay-steps", "--clip",
        "--checkpoint-dir", "--checkpoint-every", "--resume", "--plot",
        "--eval-every", "--slow", "--rank-speeds", "--device", "--weights"})
    EXPECT_TRUE(names.count(name)) << name;
}

TEST(TpRunOptions, MisplacedOptionsNameTheSubcommandThatTakesThem) {
  auto message = [](std::vector<std::string> args) {
    try {
      parse(std::move(args));
    } catch (const std::invalid_argument &error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({"train", "m.tpplan", "--data", "t", "--steps", "2",
                     "--dump", "d.safetensors"}),
            "tp-run train has no --dump (tp-run eval takes it)");
  EXPECT_EQ(message({"m.tpplan", "--data", "t", "--prompt", "a"}),
            "tp-run eval has no --prompt (tp-run generate takes it; the flat "
            "form ran tp-run eval)");
  EXPECT_EQ(message({"generate", "m.tpplan", "--max-new-tokens", "3"}),
            "tp-run generate needs one of --prompt TEXT, --prompt-ids IDS and "
            "--prompts FILE");
  EXPECT_EQ(message({"train", "m.tpplan", "--data", "t", "--steps", "2",
                     "--checkpoint-every", "1"}),
            "--checkpoint-every needs --checkpoint-dir");
  EXPECT_EQ(message({"train", "m.tpplan", "--data", "t", "--steps", "2",
                     "--threads", "1", "--threads", "2"}),
            "--threads is given 2 times; give it once");
}
