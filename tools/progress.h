// One progress line for the tool's long-running commands (demo, bench): on a terminal it is
// rewritten in place; in a log it is printed as whole lines, at most once per `log_interval_ms`
// and at every milestone, so that CI logs stay short.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace blocklstm::cli {

class ProgressLine {
public:
    // tty_interval_ms: the least time between two rewrites on a terminal.
    ProgressLine(std::FILE *out, double tty_interval_ms, double log_interval_ms)
        : out_(out), tty_(::isatty(::fileno(out)) != 0), tty_interval_ms_(tty_interval_ms),
          log_interval_ms_(log_interval_ms), last_(Clock::now() - std::chrono::hours(1)) {}

    bool on_terminal() const { return tty_; }

    // Shows `text`; a milestone (or the last update, `final`) is always shown and ends the line.
    void show(const std::string &text, bool milestone, bool final = false) {
        const auto now = Clock::now();
        const double since = std::chrono::duration<double, std::milli>(now - last_).count();
        const bool due = since >= (tty_ ? tty_interval_ms_ : log_interval_ms_);
        if (!(milestone || final || due)) return;
        last_ = now;
        if (tty_) std::fprintf(out_, "\r%s%s", text.c_str(), milestone || final ? "\n" : "   ");
        else std::fprintf(out_, "%s\n", text.c_str());
        std::fflush(out_);
    }

    // "[#####.....]" for done of total.
    static std::string bar(int64_t done, int64_t total, int width = 30) {
        const int filled = total > 0 ? static_cast<int>(done * width / total) : width;
        std::string b(static_cast<std::size_t>(width) + 2, '.');
        b.front() = '[', b.back() = ']';
        b.replace(1, static_cast<std::size_t>(filled), static_cast<std::size_t>(filled), '#');
        return b;
    }

private:
    using Clock = std::chrono::steady_clock;
    std::FILE *out_;
    bool tty_;
    double tty_interval_ms_, log_interval_ms_;
    Clock::time_point last_;
};

}  // namespace blocklstm::cli
