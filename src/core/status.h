// Status / Result: the error channel at module seams. Loaders and parsers return these with a message
// that names what was expected and what was found; hot paths assert instead.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace kestrel {

struct Error {
  std::string message;
};

// A value or an Error. Accessing value() on an error aborts with the message (a programming bug).
template <typename T>
class Result {
 public:
  Result(T value) : data_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : data_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return std::get<Error>(data_).message; }

  T& value() & { check(); return std::get<T>(data_); }
  const T& value() const& { check(); return std::get<T>(data_); }
  T&& value() && { check(); return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  void check() const {
    if (!ok()) {
      std::fprintf(stderr, "kestrel: Result::value() on error: %s\n", std::get<Error>(data_).message.c_str());
      std::abort();
    }
  }
  std::variant<T, Error> data_;
};

// Status: Result without a value.
class Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error.message)), failed_(true) {}  // NOLINT
  static Status success() { return Status(); }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
  bool failed_ = false;
};

}  // namespace kestrel

// Propagate an error from an expression returning Status or Result<...>.
#define KESTREL_TRY(expr)                                      \
  do {                                                         \
    auto&& kestrel_try_result_ = (expr);                       \
    if (!kestrel_try_result_.ok())                             \
      return ::kestrel::Error{kestrel_try_result_.error()};    \
  } while (0)
