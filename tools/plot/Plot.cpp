#include "Plot.h"

#include "tpc/runtime/Files.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <tuple>
#include <unistd.h>

namespace tpc::tools {

using runtime::writeFileAtomically;

namespace {

// Canvas and plot area, in SVG user units (pixels).
constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 80, kRight = 24, kTop = 48, kBottom = 56;
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kPlotH = kHeight - kTop - kBottom;

/// `v` with `decimals` digits after the point (locale-independent); very
/// large or small magnitudes in shortest general form.
std::string number(double v, int decimals) {
  char buf[64];
  double mag = std::fabs(v);
  std::to_chars_result result =
      (mag >= 1e9 || decimals > 9)
          ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general,
                          6)
          : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed,
                          decimals);
  return std::string(buf, result.ptr);
}

std::string coord(double v) { return number(v, 2); }

/// Text for XML character data and attribute values: markup characters
/// escaped, control characters and invalid UTF-8 replaced by U+FFFD.
std::string escapeXml(const std::string &text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (c < 0x20 || c == 0x7F)
          out += "\xEF\xBF\xBD";
        else
          out += static_cast<char>(c);
      }
      continue;
    }
    size_t size = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t cp = c & (c >= 0xF0 ? 0x07 : c >= 0xE0 ? 0x0F : 0x1F);
    bool valid = c >= 0xC2 && c <= 0xF4 && i + size <= text.size();
    for (size_t k = 1; valid && k < size; ++k) {
      auto d = static_cast<unsigned char>(text[i + k]);
      valid = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    valid = valid &&
            !(size == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) &&
            !(size == 4 && (cp < 0x10000 || cp > 0x10FFFF)) && cp != 0xFFFE &&
            cp != 0xFFFF;
    if (valid) {
      out.append(text, i, size);
      i += size;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

/// A 1, 2 or 5 times a power of ten near range / target.
double niceStep(double range, double target) {
  double raw = range / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

int decimalsFor(double step) {
  return std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
}

} // namespace

void writeLossCurveSvg(const std::string &path,
                       const std::vector<int64_t> &steps,
                       const std::vector<double> &losses,
                       const std::string &title,
                       const std::vector<int64_t> &evalSteps,
                       const std::vector<double> &evalLosses) {
  if (steps.size() != losses.size() || evalSteps.size() != evalLosses.size())
    throw std::invalid_argument(
        "writeLossCurveSvg: " + std::to_string(steps.size()) + " steps but " +
        std::to_string(losses.size()) + " losses, " +
        std::to_string(evalSteps.size()) + " validation steps but " +
        std::to_string(evalLosses.size()) + " validation losses");
  auto finite = [](const std::vector<int64_t> &at,
                   const std::vector<double> &values, std::vector<double> &xs,
                   std::vector<double> &ys) {
    for (size_t i = 0; i < at.size(); ++i)
      if (std::isfinite(values[i])) {
        xs.push_back(double(at[i]));
        ys.push_back(values[i]);
      }
  };
  std::vector<double> xs, ys, vxs, vys;
  finite(steps, losses, xs, ys);
  finite(evalSteps, evalLosses, vxs, vys);
  const size_t n = xs.size();

  // Data ranges: x as given (one step is widened by 1 on each side), y
  // padded by 5% and rounded out to whole ticks (a constant loss gets +-10%,
  // or +-1 around zero).
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (n) {
    std::vector<double> allX = xs, allY = ys;
    allX.insert(allX.end(), vxs.begin(), vxs.end());
    allY.insert(allY.end(), vys.begin(), vys.end());
    auto [xmin, xmax] = std::minmax_element(allX.begin(), allX.end());
    auto [ymin, ymax] = std::minmax_element(allY.begin(), allY.end());
    x0 = *xmin, x1 = *xmax, y0 = *ymin, y1 = *ymax;
    if (x0 == x1)
      x0 -= 1, x1 += 1;
    double pad =
        y0 == y1 ? (y0 != 0 ? std::fabs(y0) * 0.1 : 1.0) : (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  const double xStep = std::max(1.0, niceStep(x1 - x0, 8));
  const double yStep = niceStep(y1 - y0, 6);
  y0 = std::floor(y0 / yStep) * yStep;
  y1 = std::ceil(y1 / yStep) * yStep;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotW; };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * kPlotH; };

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + coord(kWidth) +
         "\" height=\"" + coord(kHeight) + "\" viewBox=\"0 0 " + coord(kWidth) +
         " " + coord(kHeight) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
         "font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text class=\"title\" x=\"" + coord(kWidth / 2) +
         "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" +
         escapeXml(title) + "</text>\n";

  // Gridlines and tick labels.
  svg += "<g class=\"grid\" stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  std::string labels;
  const int xDecimals = decimalsFor(xStep), yDecimals = decimalsFor(yStep);
  auto ticks = [](double lo, double hi, double step) {
    std::vector<double> at;
    for (double k = std::ceil(lo / step - 1e-9);
         k * step <= hi + step * 1e-9 && at.size() < 50; ++k)
      at.push_back(std::fabs(k) < 0.5 ? 0.0 : k * step);
    return at;
  };
  for (double t : ticks(x0, x1, xStep)) {
    double x = px(t);
    svg += "<line x1=\"" + coord(x) + "\" y1=\"" + coord(kTop) + "\" x2=\"" +
           coord(x) + "\" y2=\"" + coord(kTop + kPlotH) + "\"/>\n";
    labels += "<text x=\"" + coord(x) + "\" y=\"" + coord(kTop + kPlotH + 18) +
              "\" text-anchor=\"middle\">" + number(t, xDecimals) + "</text>\n";
  }
  for (double t : ticks(y0, y1, yStep)) {
    double y = py(t);
    svg += "<line x1=\"" + coord(kLeft) + "\" y1=\"" + coord(y) + "\" x2=\"" +
           coord(kLeft + kPlotW) + "\" y2=\"" + coord(y) + "\"/>\n";
    labels += "<text x=\"" + coord(kLeft - 8) + "\" y=\"" + coord(y + 4) +
              "\" text-anchor=\"end\">" + number(t, yDecimals) + "</text>\n";
  }
  svg += "</g>\n<g class=\"ticks\" fill=\"#333333\">\n" + labels + "</g>\n";

  // Axes and their titles.
  svg += "<rect class=\"axes\" x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) +
         "\" width=\"" + coord(kPlotW) + "\" height=\"" + coord(kPlotH) +
         "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  svg += "<text class=\"xlabel\" x=\"" + coord(kLeft + kPlotW / 2) + "\" y=\"" +
         coord(kHeight - 12) +
         "\" text-anchor=\"middle\" font-size=\"14\">step</text>\n";
  svg += "<text class=\"ylabel\" x=\"20\" y=\"" + coord(kTop + kPlotH / 2) +
         "\" text-anchor=\"middle\" font-size=\"14\" transform=\"rotate(-90 "
         "20 " +
         coord(kTop + kPlotH / 2) + ")\">loss</text>\n";

  if (n == 0) {
    svg += "<text x=\"" + coord(kLeft + kPlotW / 2) + "\" y=\"" +
           coord(kTop + kPlotH / 2) +
           "\" text-anchor=\"middle\" fill=\"#888888\">no finite loss "
           "values</text>\n";
  } else {
    auto polyline = [&](const char *cls, const std::vector<double> &at,
                        const std::vector<double> &values, const char *style) {
      svg += std::string("<polyline class=\"") + cls + "\" " + style +
             " fill=\"none\" stroke-linejoin=\"round\" points=\"";
      for (size_t i = 0; i < at.size(); ++i)
        svg += (i ? " " : "") + coord(px(at[i])) + "," + coord(py(values[i]));
      svg += "\"/>\n";
    };
    // Legend entries: a line's colour and width, and its label.
    std::vector<std::tuple<const char *, const char *, std::string>> legend;
    polyline("loss", xs, ys, "stroke=\"#9ecae1\" stroke-width=\"1.2\"");
    if (n == 1)
      svg += "<circle class=\"point\" cx=\"" + coord(px(xs[0])) + "\" cy=\"" +
             coord(py(ys[0])) + "\" r=\"3.5\" fill=\"#08519c\"/>\n";
    if (n >= 5) {
      // Centred moving average over about 5% of the points; the window
      // shrinks symmetrically towards the ends, so it ends on the data.
      const size_t half = std::max<size_t>(1, n / 40);
      std::vector<double> smooth(n);
      for (size_t i = 0; i < n; ++i) {
        size_t h = std::min({half, i, n - 1 - i});
        double sum = 0;
        for (size_t k = i - h; k <= i + h; ++k)
          sum += ys[k];
        smooth[i] = sum / double(2 * h + 1);
      }
      polyline("smoothed", xs, smooth, "stroke=\"#08519c\" stroke-width=\"2\"");
      legend.emplace_back("#9ecae1", "1.2", "loss");
      legend.emplace_back("#08519c", "2",
                          "moving average (" + std::to_string(2 * half + 1) +
                              ")");
    }
    if (!vxs.empty()) {
      // Held-out loss: a line through its evaluations, each one marked.
      polyline("validation", vxs, vys, "stroke=\"#d94801\" stroke-width=\"2\"");
      for (size_t i = 0; i < vxs.size(); ++i)
        svg += "<circle class=\"validation-point\" cx=\"" + coord(px(vxs[i])) +
               "\" cy=\"" + coord(py(vys[i])) +
               "\" r=\"3\" fill=\"#d94801\"/>\n";
      if (legend.empty())
        legend.emplace_back("#9ecae1", "1.2", "training loss");
      legend.emplace_back("#d94801", "2", "validation loss");
    }
    if (!legend.empty()) {
      // Top right inside the plot area, one row of 20 units per entry.
      const double lx = kLeft + kPlotW - 190, ly = kTop + 12;
      svg += "<g class=\"legend\">\n<rect x=\"" + coord(lx - 8) + "\" y=\"" +
             coord(ly - 8) + "\" width=\"190\" height=\"" +
             coord(4 + 20 * double(legend.size())) +
             "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
      for (size_t i = 0; i < legend.size(); ++i) {
        const auto &[colour, width, label] = legend[i];
        const double y = ly + 4 + 20 * double(i);
        svg += "<line x1=\"" + coord(lx) + "\" y1=\"" + coord(y) + "\" x2=\"" +
               coord(lx + 24) + "\" y2=\"" + coord(y) + "\" stroke=\"" +
               colour + "\" stroke-width=\"" + width + "\"/>\n";
        svg += "<text x=\"" + coord(lx + 32) + "\" y=\"" + coord(y + 4) +
               "\">" + escapeXml(label) + "</text>\n";
      }
      svg += "</g>\n";
    }
  }
  svg += "</svg>\n";
  writeFileAtomically(path, svg);
}

void writeTrainingCurvesSvg(const std::string &path,
                            const runtime::TrainResult &result) {
  std::vector<int64_t> steps, evalSteps;
  std::vector<double> losses, evalLosses;
  for (const runtime::StepRecord &r : result.records)
    if (std::isfinite(r.loss)) {
      steps.push_back(r.step);
      losses.push_back(r.loss);
    }
  for (const runtime::EvalRecord &e : result.evals) {
    evalSteps.push_back(e.step);
    evalLosses.push_back(e.loss);
  }
  writeLossCurveSvg(path, steps, losses,
                    evalSteps.empty() ? "training loss"
                                      : "training and validation loss",
                    evalSteps, evalLosses);
}

void writeTimelineSvg(const std::string &path,
                      const std::vector<TimelineBar> &bars, int rows,
                      const std::string &title) {
  if (rows < 1)
    throw std::invalid_argument("a timeline needs at least one row");
  double end = 0;
  std::vector<std::string> groups;
  for (const TimelineBar &bar : bars) {
    if (bar.row < 0 || bar.rows < 1 || bar.row + bar.rows > rows ||
        !(bar.end >= bar.start) || !(bar.start >= 0))
      throw std::invalid_argument("timeline bar of '" + bar.group +
                                  "' lies outside the rows or ends before "
                                  "it starts");
    end = std::max(end, bar.end);
    if (std::find(groups.begin(), groups.end(), bar.group) == groups.end())
      groups.push_back(bar.group);
  }
  if (end <= 0)
    end = 1;
  // A colour-blind-safe qualitative palette (Okabe-Ito), then greys.
  static const char *palette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                  "#56B4E9", "#D55E00", "#F0E442", "#000000"};
  auto colour = [&](const std::string &group) {
    size_t g =
        size_t(std::find(groups.begin(), groups.end(), group) - groups.begin());
    return g < std::size(palette) ? std::string(palette[g])
                                  : std::string("#999999");
  };
  const double legendH = 20.0 * double((groups.size() + 3) / 4);
  const double height = kTop + kBottom + legendH + std::max(120.0, 28.0 * rows);
  const double plotH = height - kTop - kBottom - legendH;
  const double rowH = plotH / rows;
  auto x = [&](double t) { return kLeft + kPlotW * t / end; };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    coord(kWidth) + "\" height=\"" + coord(height) +
                    "\" viewBox=\"0 0 " + coord(kWidth) + " " + coord(height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + coord(kWidth / 2) +
         "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         escapeXml(title) + "</text>\n";
  const double step = niceStep(end, 8);
  for (double t = 0; t <= end + step * 1e-9; t += step) {
    svg += "<line x1=\"" + coord(x(t)) + "\" y1=\"" + coord(kTop) + "\" x2=\"" +
           coord(x(t)) + "\" y2=\"" + coord(kTop + plotH) +
           "\" stroke=\"#dddddd\"/>\n";
    svg += "<text x=\"" + coord(x(t)) + "\" y=\"" + coord(kTop + plotH + 16) +
           "\" text-anchor=\"middle\">" + number(t, decimalsFor(step)) +
           "</text>\n";
  }
  svg += "<text x=\"" + coord(kLeft + kPlotW / 2) + "\" y=\"" +
         coord(kTop + plotH + 36) +
         "\" text-anchor=\"middle\">seconds</text>\n";
  for (int r = 0; r < rows; ++r)
    svg += "<text x=\"" + coord(kLeft - 8) + "\" y=\"" +
           coord(kTop + rowH * (r + 0.5) + 4) + "\" text-anchor=\"end\">rank " +
           std::to_string(r) + "</text>\n";
  for (const TimelineBar &bar : bars) {
    const double x0 = x(bar.start), w = std::max(1.0, x(bar.end) - x0);
    const double y0 = kTop + rowH * bar.row + 2, h = rowH * bar.rows - 4;
    svg += "<rect class=\"bar\" data-group=\"" + escapeXml(bar.group) +
           "\" x=\"" + coord(x0) + "\" y=\"" + coord(y0) + "\" width=\"" +
           coord(w) + "\" height=\"" + coord(h) + "\" fill=\"" +
           colour(bar.group) + "\" fill-opacity=\"0.8\" stroke=\"white\">" +
           "<title>" + escapeXml(bar.group + " " + bar.label) + " (" +
           number(bar.start, 1) + "-" + number(bar.end, 1) +
           " s)</title></rect>\n";
    // About 7 units per character at this size.
    if (w > 7.0 * double(bar.label.size()) + 6 && h >= 14)
      svg += "<text x=\"" + coord(x0 + 3) + "\" y=\"" + coord(y0 + h / 2 + 4) +
             "\" fill=\"white\">" + escapeXml(bar.label) + "</text>\n";
  }
  svg += "<rect x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) + "\" width=\"" +
         coord(kPlotW) + "\" height=\"" + coord(plotH) +
         "\" fill=\"none\" stroke=\"#333333\"/>\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lx = kLeft + double(g % 4) * (kPlotW / 4);
    const double ly = kTop + plotH + kBottom - 8 + 20.0 * double(g / 4);
    svg += "<rect x=\"" + coord(lx) + "\" y=\"" + coord(ly - 10) +
           "\" width=\"12\" height=\"12\" fill=\"" + colour(groups[g]) +
           "\"/><text x=\"" + coord(lx + 16) + "\" y=\"" + coord(ly) + "\">" +
           escapeXml(groups[g]) + "</text>\n";
  }
  svg += "</svg>\n";
  writeFileAtomically(path, svg);
}

} // namespace tpc::tools
