// CommunicationTimer: the wall time this rank spends inside communication, summed over every
// group of an ObservedCommunicator tree (TP and DP collectives alike, posting and waiting), so a
// whole job's communication time can be read off one counter. Used by `megatron bench --mode
// step` to report the communication share of a training step.
#pragma once

#include "core/timer.h"
#include "distributed/observed_communicator.h"

namespace megatron {

class CommunicationTimer final : public CommunicationObserver {
 public:
  void enter(const char*, int, int) override { clock_.start(); }
  void leave() override { clock_.stop(); }
  // Seconds spent inside observed operations so far.
  double seconds() const { return clock_.seconds(); }

 private:
  Timer clock_;
};

}  // namespace megatron
