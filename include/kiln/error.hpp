// Every error kiln raises derives from kiln::Error; messages name the op and the values.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Shapes that cannot broadcast, wrong element counts, inner dimensions that differ.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// An op that does not accept the element type it was given.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// A dimension or index out of range.
class IndexError : public Error {
 public:
  using Error::Error;
};

// An argument with a bad value (a negative step, an empty reduction without identity, ...).
class ValueError : public Error {
 public:
  using Error::Error;
};

// A device that is absent, tensors on two devices, a failed driver or library call.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Distributed training (kiln::dist, `kiln launch`): a rendezvous that fails or times out, a peer
// that died or hung up, a launch environment that is missing or contradicts itself.
class DistError : public Error {
 public:
  using Error::Error;
};

class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A kiln bug, not the caller's: an invariant kiln itself broke (an unreachable switch default, an
// internal call whose arguments disagree). Never raised by bad user input; please report it.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln
