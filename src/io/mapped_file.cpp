#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kestrel {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Error{"cannot open '" + path + "': " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{"'" + path + "' is not a regular file"};
  }
  auto file = std::shared_ptr<MappedFile>(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return Error{"cannot map '" + path + "': " + why};
    }
    file->data_ = static_cast<const uint8_t*>(p);
    file->owns_mapping_ = true;
  }
  ::close(fd);
  return file;
}

std::shared_ptr<MappedFile> MappedFile::from_memory(const uint8_t* data, size_t size) {
  auto file = std::shared_ptr<MappedFile>(new MappedFile());
  file->data_ = data;
  file->size_ = size;
  file->path_ = "<memory>";
  return file;
}

MappedFile::~MappedFile() {
  if (owns_mapping_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kestrel
