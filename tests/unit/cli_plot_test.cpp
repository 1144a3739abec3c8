// `megatron plot`'s pieces: round ticks and their labels, loss panels from metrics rows (train,
// validation and final validation, iterations and tokens, BERT's sop loss, the learning rate),
// the SVG and the terminal chart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/plot/chart.h"
#include "cli/plot/loss_curves.h"
#include "cli/plot/svg_chart.h"
#include "cli/plot/text_chart.h"

namespace megatron::cli {
namespace {

using ::testing::HasSubstr;

// Training rows every 10 iterations to 40 and validation rows at 20 and 40, then the final
// validation at 40 and a row whose steps were all skipped. With `ramp` the batch doubles after
// iteration 20 (tokens are then no constant multiple of the iterations).
std::vector<nlohmann::json> rows(bool with_sop, bool ramp = false) {
  std::vector<nlohmann::json> r;
  auto tokens = [ramp](int it) { return ramp && it > 20 ? (2 * it - 20) * 1024 : it * 1024; };
  for (int it = 10; it <= 40; it += 10) {
    nlohmann::json train = {{"type", "train"},
                            {"iteration", it},
                            {"consumed_tokens", tokens(it)},
                            {"learning_rate", 1e-3 / it},
                            {"lm_loss", 11.0 - it / 10.0}};
    if (with_sop) train["sop_loss"] = 0.7;
    r.push_back(train);
    if (it % 20 == 0)
      r.push_back({{"type", "validation"},
                   {"iteration", it},
                   {"consumed_tokens", tokens(it)},
                   {"lm_loss", 11.2 - it / 10.0}});
  }
  r.push_back({{"type", "validation"},
               {"iteration", 40},
               {"consumed_tokens", tokens(40)},
               {"lm_loss", 7.3},
               {"final", true}});
  r.push_back({{"type", "train"}, {"iteration", 50}, {"lm_loss", nullptr}});  // all skipped
  return r;
}

TEST(Plot, NiceTicksAndLabels) {
  EXPECT_EQ(nice_ticks(0, 400, 5), (std::vector<double>{0, 100, 200, 300, 400}));
  EXPECT_EQ(nice_ticks(6.04, 10.96, 5), (std::vector<double>{7, 8, 9, 10}));
  EXPECT_EQ(nice_ticks(0.1, 0.35, 5), (std::vector<double>{0.1, 0.15, 0.2, 0.25, 0.3, 0.35}));
  EXPECT_EQ(tick_label(200, 100), "200");
  EXPECT_EQ(tick_label(0.15, 0.05), "0.15");
  EXPECT_EQ(tick_label(2500000, 500000), "2.5M");
  EXPECT_EQ(tick_label(40000, 20000), "40k");
  EXPECT_EQ(tick_label(3e9, 1e9), "3B");
}

TEST(Plot, LossPanelsHaveTrainAndValidationAgainstIterationsAndTokens) {
  // A constant batch: tokens are iterations x 1024, and a tokens panel would repeat the
  // iterations panel; so lm loss vs iterations, then the learning rate.
  std::vector<ChartPanel> panels = loss_panels({{"a", rows(false)}, {"b", rows(false)}});
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_EQ(panels[0].title, "lm loss vs iterations");
  // a train, a validation, a final validation, and the same for b.
  ASSERT_EQ(panels[0].lines.size(), 6u);
  EXPECT_EQ(panels[0].lines[0].label, "a train");
  EXPECT_FALSE(panels[0].lines[0].dashed);
  EXPECT_EQ(panels[0].lines[0].xy.size(), 4u);  // the null loss at 50 is skipped
  EXPECT_EQ(panels[0].lines[0].xy[0], (std::pair<double, double>{10, 10.0}));
  // The interval evaluations at 20 and 40, without the final one, which is its own marker.
  EXPECT_EQ(panels[0].lines[1].label, "a validation");
  EXPECT_TRUE(panels[0].lines[1].dashed);
  EXPECT_EQ(panels[0].lines[1].xy,
            (std::vector<std::pair<double, double>>{{20, 9.2}, {40, 11.2 - 4.0}}));
  EXPECT_EQ(panels[0].lines[2].label, "a final validation");
  EXPECT_TRUE(panels[0].lines[2].dashed);
  EXPECT_EQ(panels[0].lines[2].xy, (std::vector<std::pair<double, double>>{{40, 7.3}}));
  EXPECT_EQ(panels[0].lines[3].color, 1);
  EXPECT_EQ(panels[1].title, "learning rate vs iterations");
  ASSERT_EQ(panels[1].lines.size(), 2u);  // one per run
  EXPECT_EQ(panels[1].lines[0].xy[3], (std::pair<double, double>{40, 1e-3 / 40}));

  // A batch-size ramp: tokens are an axis of their own.
  panels = loss_panels({{"ramp", rows(false, /*ramp=*/true)}});
  ASSERT_EQ(panels.size(), 3u);
  EXPECT_EQ(panels[1].title, "lm loss vs tokens");
  EXPECT_EQ(panels[1].x_label, "tokens");
  EXPECT_EQ(panels[1].lines[0].xy[3], (std::pair<double, double>{60 * 1024, 7.0}));
  // Two runs of different constant batches: compared by tokens too.
  std::vector<nlohmann::json> twice = rows(false);
  for (nlohmann::json& r : twice)
    if (r.contains("consumed_tokens")) r["consumed_tokens"] = 2 * r["consumed_tokens"].get<int>();
  EXPECT_EQ(loss_panels({{"a", rows(false)}, {"b", twice}}).size(), 3u);

  EXPECT_EQ(loss_panels({{"bert", rows(true, true)}}).size(), 5u);  // + sop loss, both axes
  std::vector<nlohmann::json> old = rows(false);  // written before these fields existed
  for (nlohmann::json& r : old) {
    r.erase("consumed_tokens");
    r.erase("learning_rate");
  }
  EXPECT_EQ(loss_panels({{"old", old}}).size(), 1u);
  EXPECT_EQ(run_label("runs/own/tp2/metrics.jsonl"), "tp2");
  EXPECT_EQ(run_label("study/small_pre.jsonl"), "small_pre");
  EXPECT_EQ(loss_summary({"a", rows(false)}),
            "a: train lm loss 10.000 -> 7.000 (iterations 10-40); validation lm loss 9.200 -> "
            "7.200, perplexity 9897.1 -> 1339.4 (iterations 20-40); final validation lm loss "
            "7.300, perplexity 1480.3 at iteration 40");
}

TEST(Plot, SvgHasOnePolylinePerLineAndEscapesLabels) {
  std::vector<megatron::cli::Run> runs = {{"a<b>", rows(false)}};
  const std::string svg = render_svg("t & u", loss_panels(runs), 2);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("t &amp; u"));
  EXPECT_THAT(svg, HasSubstr("a&lt;b&gt; validation"));
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1))
    ++polylines;
  // train, validation and the final validation's marker against iterations; the learning rate.
  EXPECT_EQ(polylines, 4u);
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(Plot, TextChartPutsTheCurveWhereItBelongs) {
  ChartPanel panel{"lm loss", "iteration", "lm loss", {}};
  panel.lines.push_back({"train", 0, false, {{0, 10}, {100, 0}}});
  panel.lines.push_back({"validation", 0, true, {{100, 0}}});
  const std::string text = render_text(panel, 21, 11);
  std::vector<std::string> lines;
  for (size_t b = 0, e; (e = text.find('\n', b)) != std::string::npos; b = e + 1)
    lines.push_back(text.substr(b, e - b));
  ASSERT_EQ(lines.size(), 1u + 11u + 2u);  // title, rows, axis line, axis labels
  EXPECT_EQ(lines[0], "lm loss   (* train  o validation)");
  // The diagonal from (0, 10) at the top left to (100, 0) at the bottom right, the validation
  // point drawn over its end.
  const size_t bar = lines[1].find('|');
  EXPECT_EQ(lines[1][bar + 1], '*');
  EXPECT_EQ(lines[11].substr(bar + 1), std::string(20, ' ') + "o");
  EXPECT_THAT(lines[13], HasSubstr("iteration"));
  EXPECT_EQ(lines[13].back(), '0');  // "... 100"
}

}  // namespace
}  // namespace megatron::cli
