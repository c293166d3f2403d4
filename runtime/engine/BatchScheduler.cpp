#include "runtime/engine/BatchScheduler.h"

#include <algorithm>
#include <chrono>
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
  SequenceModel(BatchScheduler &scheduler, kv::SequenceId sequence,
                const std::atomic<bool> *cancelled)
      : scheduler_(scheduler), sequence_(sequence), cancelled_(cancelled) {}
  ~SequenceModel() override { scheduler_.close(this); }

  int64_t vocabSize() const override { return scheduler_.backend_.vocabSize(); }

  // A request's forwards share the scheduler's reservation; they must fit in one packed run.
  // The reserve is the admission (the request's worst case in KV pages): tokenizing, resolving
  // knobs and waiting for pages hold up nobody.
  Status reserve(int64_t tokens, int64_t logitRows) override {
    const int64_t longest = scheduler_.backend_.maxSequenceLength();
    if (tokens > longest)
      return Status::error(StatusCode::contextLengthExceeded,
                           "a sequence of " + std::to_string(tokens) +
                               " tokens exceeds the backend's maximum of " +
                               std::to_string(longest));
    if (logitRows > scheduler_.limits_.tokensPerRun)
      return Status::error(std::to_string(logitRows) + " logit rows exceed the scheduler's " +
                           std::to_string(scheduler_.limits_.tokensPerRun) + " per forward");
    {
      std::unique_lock<std::mutex> lock(scheduler_.mutex_);
      DLM_RETURN_IF_ERROR(scheduler_.admit(*this, tokens, lock));
    }
    logits_.reserve(static_cast<size_t>(logitRows * vocabSize()));
    return Status::ok();
  }

  // Waits until the scheduler has run this forward with the other requests'.
  StatusOr<sampling::LogitsView> forward(const sampling::ForwardSpec &spec) override {
    if (spec.fed() < 0)
      return Status::error("a forward feeding " + std::to_string(spec.fed()) + " tokens");
    if (spec.fed() > scheduler_.limits_.tokensPerRun)
      return Status::error("a forward of " + std::to_string(spec.fed()) +
                           " tokens exceeds the scheduler's " +
                           std::to_string(scheduler_.limits_.tokensPerRun) + " per forward");
    Waiting waiting{this, &spec};
    std::unique_lock<std::mutex> lock(scheduler_.mutex_);
    if (scheduler_.stopping_)
      return Status::error(StatusCode::unavailable, "the scheduler is shutting down");
    if (cancelled())
      return scheduler_.cancelledError();
    // Programs reserve before they forward; one that does not is admitted for what it feeds.
    if (!running_)
      DLM_RETURN_IF_ERROR(scheduler_.admit(*this, spec.fed(), lock));
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
  bool cancelled() const { return cancelled_ && cancelled_->load(std::memory_order_relaxed); }
  // Guarded by the scheduler's mutex: whether the request is admitted (counted in open_), and
  // the pool pages it holds.
  bool running_ = false;
  int64_t pages_ = 0;
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
  const std::atomic<bool> *const cancelled_;
  std::vector<float> logits_, captured_;
  int64_t capturedWidth_ = 0;
};

StatusOr<std::unique_ptr<BatchScheduler>> BatchScheduler::create(Backend &backend,
                                                                 const SchedulerLimits &limits) {
  if (!backend.batchesSequences())
    return Status::error("not supported yet: batched requests on the " +
                         std::string(backend.name()) + " backend");
  if (limits.tokensPerRun < 1)
    return Status::error("tokens per packed forward must be positive, got " +
                         std::to_string(limits.tokensPerRun));
  if (limits.kvPages < 1 || limits.kvPageTokens < 1)
    return Status::error("the KV pool needs pages of at least one token, got " +
                         std::to_string(limits.kvPages) + " pages of " +
                         std::to_string(limits.kvPageTokens));
  if (limits.maxRunning < 0 || limits.maxWaiting < 0)
    return Status::error("the most running and waiting requests cannot be negative");
  // Keys reach the longest sequence; rows and logit rows the packed run's.
  DLM_RETURN_IF_ERROR(backend.reservePacked(
      std::max(limits.tokensPerRun, backend.maxSequenceLength()), limits.tokensPerRun));
  return std::unique_ptr<BatchScheduler>(new BatchScheduler(backend, limits));
}

BatchScheduler::BatchScheduler(Backend &backend, const SchedulerLimits &limits)
    : backend_(backend), limits_(limits), thread_([this] { loop(); }) {}

// Every model must be gone first (they call back into the scheduler when they close).
BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

StatusOr<std::unique_ptr<sampling::DecodeModel>>
BatchScheduler::open(const std::atomic<bool> *cancelled) {
  std::lock_guard<std::mutex> lock(mutex_);
  StatusOr<kv::SequenceId> sequence = backend_.createSequence();
  if (!sequence)
    return sequence.status();
  return std::unique_ptr<sampling::DecodeModel>(new SequenceModel(*this, *sequence, cancelled));
}

Status BatchScheduler::cancelledError() {
  ++stats_.cancelled;
  return Status::error(StatusCode::cancelled, "the request was cancelled");
}

Status BatchScheduler::admit(SequenceModel &model, int64_t tokens,
                             std::unique_lock<std::mutex> &lock) {
  const int64_t pages = (tokens + limits_.kvPageTokens - 1) / limits_.kvPageTokens;
  if (model.running_ && pages <= model.pages_)
    return Status::ok();
  if (pages > limits_.kvPages) {
    ++stats_.refused;
    return Status::error(StatusCode::contextLengthExceeded,
                         "the request needs " + std::to_string(pages) + " KV pages of " +
                             std::to_string(limits_.kvPageTokens) + " tokens; the pool has " +
                             std::to_string(limits_.kvPages));
  }
  // A running request that reserves more takes the pages if they are free. Waiting for them
  // could wait forever (on the requests queued behind it, or on another request that grows), and
  // preempting for them is not built: every shipped program reserves once, before it runs.
  if (model.running_) {
    if (reservedPages_ + pages - model.pages_ > limits_.kvPages)
      return Status::error("not supported yet: a request reserving " + std::to_string(pages) +
                           " KV pages after it was admitted with " +
                           std::to_string(model.pages_) + " while the pool is full (preemption)");
    reservedPages_ += pages - model.pages_;
    model.pages_ = pages;
    return Status::ok();
  }
  const int64_t extra = pages - model.pages_;
  auto roomFor = [&] {
    return reservedPages_ + extra <= limits_.kvPages &&
           (limits_.maxRunning == 0 || open_ < limits_.maxRunning);
  };
  auto fits = [&] { return admissions_.front() == &model && roomFor(); };
  if (limits_.maxWaiting > 0 && static_cast<int64_t>(admissions_.size()) >= limits_.maxWaiting &&
      !(admissions_.empty() && roomFor())) {
    ++stats_.refused;
    return Status::error(StatusCode::queueFull,
                         "the waiting queue is full (" + std::to_string(admissions_.size()) +
                             " requests wait for KV pages)");
  }
  admissions_.push_back(&model);
  Status status = Status::ok();
  while (!fits()) {
    if (model.cancelled()) {
      status = cancelledError();
      break;
    }
    if (stopping_) {
      status = Status::error(StatusCode::unavailable, "the scheduler is shutting down");
      break;
    }
    // Cancellation is a flag, not a notification: look at it now and then.
    changed_.wait_for(lock, std::chrono::milliseconds(20));
  }
  admissions_.erase(std::find(admissions_.begin(), admissions_.end(), &model));
  changed_.notify_all(); // the next in line may fit now, or may be first now
  if (!status)
    return status;
  reservedPages_ += extra;
  model.pages_ = pages;
  model.running_ = true;
  ++open_;
  ++stats_.admitted;
  return Status::ok();
}

void BatchScheduler::close(SequenceModel *model) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (model->running_)
    --open_;
  reservedPages_ -= model->pages_;
  (void)backend_.removeSequence(model->sequence());
  changed_.notify_all();
}

SchedulerStats BatchScheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SchedulerStats stats = stats_;
  stats.waiting = static_cast<int64_t>(admissions_.size());
  stats.running = open_;
  stats.kvPages = limits_.kvPages;
  stats.kvPagesReserved = reservedPages_;
  const KvPoolStats pool = backend_.kvPoolStats();
  stats.kvPagesInUse = pool.inUse;
  stats.kvPagesCached = pool.cached;
  stats.prefixTokensReused = pool.adoptedTokens;
  return stats;
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
      const int64_t fed = w->spec->fed(), wanted = w->spec->rows.count();
      if (!group.empty() &&
          (tokens + fed > limits_.tokensPerRun || rows + wanted > limits_.tokensPerRun)) {
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
  for (const SequenceForward &forward : forwards)
    stats_.fedTokens += forward.spec.fed();
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
    stats_.logitRows += w->rows;
    const float *first = logits->row(row);
    w->model->logits().assign(first, first + w->rows * logits->vocab);
    row += w->rows;
    const int64_t fed = w->spec->fed();
    w->model->setCaptured(captured.data ? captured.row(fedRow) : nullptr, fed, captured.vocab);
    fedRow += fed;
  }
}

} // namespace dlm::engine
