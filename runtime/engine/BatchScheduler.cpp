#include "runtime/engine/BatchScheduler.h"

#include <algorithm>
#include <map>
#include <string>

namespace dlm::engine {

// One forward a request waits in.
struct BatchScheduler::Waiting {
  SequenceModel *model = nullptr;
  const sampling::ForwardSpec *spec = nullptr;
  bool done = false;
  Status status = Status::ok();
  int64_t rows = 0;
};

class BatchScheduler::SequenceModel : public sampling::DecodeModel {
public:
  SequenceModel(BatchScheduler &scheduler, kv::SequenceId sequence)
      : scheduler_(scheduler), sequence_(sequence) {}
  ~SequenceModel() override { scheduler_.close(this); }

  int64_t vocabSize() const override { return scheduler_.backend_.vocabSize(); }

  // A request's forwards share the scheduler's reservation; they must fit in one packed run.
  // The request counts as running (every run waits for it) from its first reserve, which its
  // program makes before any forward: tokenizing and resolving knobs hold up nobody.
  Status reserve(int64_t tokens, int64_t logitRows) override {
    {
      std::lock_guard<std::mutex> lock(scheduler_.mutex_);
      if (!running_) {
        running_ = true;
        ++scheduler_.open_;
      }
    }
    const int64_t longest = scheduler_.backend_.maxSequenceLength();
    if (tokens > longest)
      return Status::error("a sequence of " + std::to_string(tokens) +
                           " tokens exceeds the backend's maximum of " + std::to_string(longest));
    if (logitRows > scheduler_.maxTokens_)
      return Status::error(std::to_string(logitRows) + " logit rows exceed the scheduler's " +
                           std::to_string(scheduler_.maxTokens_) + " per forward");
    logits_.reserve(static_cast<size_t>(logitRows * vocabSize()));
    return Status::ok();
  }

  StatusOr<sampling::LogitsView> forwardFull(const int32_t *tokens, int64_t count, int64_t keep,
                                             sampling::LogitRows rows) override {
    return forward(sampling::ForwardSpec::of(sampling::ForwardSpec::Mode::full, tokens, count,
                                             keep, rows));
  }
  StatusOr<sampling::LogitsView> forwardCached(const int32_t *tokens, int64_t count, int64_t keep,
                                               sampling::LogitRows rows) override {
    return forward(sampling::ForwardSpec::of(sampling::ForwardSpec::Mode::cached, tokens, count,
                                             keep, rows));
  }

  // Waits until the scheduler has run this forward with the other requests'.
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &spec) override {
    if (fedTokens(spec) > scheduler_.maxTokens_)
      return Status::error("a forward of " + std::to_string(fedTokens(spec)) +
                           " tokens exceeds the scheduler's " +
                           std::to_string(scheduler_.maxTokens_) + " per forward");
    Waiting waiting{this, &spec};
    std::unique_lock<std::mutex> lock(scheduler_.mutex_);
    if (scheduler_.stopping_)
      return Status::error("the scheduler is shutting down");
    if (!running_) {
      running_ = true;
      ++scheduler_.open_;
    }
    scheduler_.waiting_.push_back(&waiting);
    scheduler_.changed_.notify_all();
    scheduler_.changed_.wait(lock, [&] { return waiting.done; });
    if (!waiting.status)
      return waiting.status;
    return sampling::LogitsView{logits_.data(), waiting.rows, vocabSize()};
  }

  Status trimCache(int64_t length) override {
    std::lock_guard<std::mutex> lock(scheduler_.mutex_);
    return scheduler_.backend_.trimSequence(sequence_, length);
  }

  sampling::LogitsView capturedRows() const override {
    return captured_.empty() ? sampling::LogitsView{}
                             : sampling::LogitsView{captured_.data(),
                                                    static_cast<int64_t>(captured_.size()) /
                                                        capturedWidth_,
                                                    capturedWidth_};
  }

  kv::SequenceId sequence() const { return sequence_; }
  bool running() const { return running_; }
  std::vector<float> &logits() { return logits_; }
  // The run's captured rows of this forward; none when it captured nothing.
  void setCaptured(const float *rows, int64_t count, int64_t width) {
    if (!rows) {
      captured_.clear();
      return;
    }
    captured_.assign(rows, rows + count * width);
    capturedWidth_ = width;
  }

private:
  BatchScheduler &scheduler_;
  const kv::SequenceId sequence_;
  std::vector<float> logits_, captured_;
  int64_t capturedWidth_ = 0;
  bool running_ = false; // counted in the scheduler's open_ (guarded by its mutex)
};

StatusOr<std::unique_ptr<BatchScheduler>> BatchScheduler::create(Backend &backend,
                                                                 int64_t maxTokens) {
  if (!backend.batchesSequences())
    return Status::error("not supported yet: batched requests on the " +
                         std::string(backend.name()) + " backend");
  if (maxTokens < 1)
    return Status::error("tokens per packed forward must be positive, got " +
                         std::to_string(maxTokens));
  // Keys reach the longest sequence; rows and logit rows the packed run's.
  DLM_RETURN_IF_ERROR(
      backend.reservePacked(std::max(maxTokens, backend.maxSequenceLength()), maxTokens));
  return std::unique_ptr<BatchScheduler>(new BatchScheduler(backend, maxTokens));
}

BatchScheduler::BatchScheduler(Backend &backend, int64_t maxTokens)
    : backend_(backend), maxTokens_(maxTokens), thread_([this] { loop(); }) {}

// Every model must be gone first (they call back into the scheduler when they close).
BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

StatusOr<std::unique_ptr<sampling::DecodeModel>> BatchScheduler::open() {
  std::lock_guard<std::mutex> lock(mutex_);
  StatusOr<kv::SequenceId> sequence = backend_.createSequence();
  if (!sequence)
    return sequence.status();
  return std::unique_ptr<sampling::DecodeModel>(new SequenceModel(*this, *sequence));
}

void BatchScheduler::close(SequenceModel *model) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (model->running())
    --open_;
  (void)backend_.removeSequence(model->sequence());
  changed_.notify_all();
}

SchedulerStats BatchScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// A run starts when every open request waits in a forward: requests doing host work between
// forwards (sampling, accept rules) hold it up only for that work.
void BatchScheduler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ ||
             (!waiting_.empty() && static_cast<int64_t>(waiting_.size()) >= open_);
    });
    if (waiting_.empty() && stopping_)
      return;
    runWaiting();
    changed_.notify_all();
  }
}

void BatchScheduler::runWaiting() {
  std::map<std::string, std::vector<Waiting *>> byFunction;
  for (Waiting *w : waiting_)
    byFunction[std::string(w->spec->function)].push_back(w);
  waiting_.clear();
  for (auto &[function, forwards] : byFunction) {
    std::vector<Waiting *> group;
    int64_t tokens = 0, rows = 0;
    for (Waiting *w : forwards) {
      const int64_t fed = fedTokens(*w->spec), wanted = w->spec->rows.count();
      if (!group.empty() && (tokens + fed > maxTokens_ || rows + wanted > maxTokens_)) {
        runGroup(group);
        group.clear();
        tokens = rows = 0;
      }
      group.push_back(w);
      tokens += fed;
      rows += wanted;
    }
    runGroup(group);
  }
}

void BatchScheduler::runGroup(const std::vector<Waiting *> &group) {
  std::vector<SequenceForward> forwards;
  for (const Waiting *w : group)
    forwards.push_back({w->model->sequence(), *w->spec});
  StatusOr<sampling::LogitsView> logits = backend_.forwardBatch(group.front()->spec->function,
                                                                forwards);
  if (!logits && group.size() > 1) {
    // One request's bad forward must not fail the others: each alone names its own error.
    for (Waiting *w : group)
      runGroup({w});
    return;
  }
  ++stats_.runs;
  stats_.forwards += static_cast<int64_t>(group.size());
  stats_.mostPerRun = std::max<int64_t>(stats_.mostPerRun, static_cast<int64_t>(group.size()));
  const sampling::LogitsView captured = backend_.capturedRows();
  int64_t row = 0, fedRow = 0;
  for (Waiting *w : group) {
    w->done = true;
    if (!logits) {
      w->status = logits.status();
      continue;
    }
    w->rows = w->spec->rows.count();
    const float *first = logits->row(row);
    w->model->logits().assign(first, first + w->rows * logits->vocab);
    row += w->rows;
    const int64_t fed = fedTokens(*w->spec);
    w->model->setCaptured(captured.data ? captured.row(fedRow) : nullptr, fed, captured.vocab);
    fedRow += fed;
  }
}

} // namespace dlm::engine
