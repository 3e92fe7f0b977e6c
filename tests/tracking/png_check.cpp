// png_check FILE WIDTH HEIGHT [#rrggbb>=N | #rrggbb=0]...
// Decodes FILE with libpng (a PNG that libpng refuses fails the check), requires the given size,
// and counts the pixels close to each colour (within 24 per channel, for anti-aliased lines):
// `>=N` requires at least N of them, `=0` none. Exit status 0 when every check holds.
#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: png_check FILE WIDTH HEIGHT [#rrggbb>=N | #rrggbb=0]...\n");
    return 2;
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&image, argv[1]) == 0) {
    std::fprintf(stderr, "png_check: %s is not a readable PNG: %s\n", argv[1], image.message);
    return 1;
  }
  image.format = PNG_FORMAT_RGB;
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr) == 0) {
    std::fprintf(stderr, "png_check: %s does not decode: %s\n", argv[1], image.message);
    return 1;
  }
  bool ok = true;
  const unsigned width = static_cast<unsigned>(std::atoi(argv[2]));
  const unsigned height = static_cast<unsigned>(std::atoi(argv[3]));
  if (image.width != width || image.height != height) {
    std::fprintf(stderr, "png_check: %s is %ux%u, not %ux%u\n", argv[1], image.width,
                 image.height, width, height);
    ok = false;
  }
  for (int i = 4; i < argc; ++i) {
    const std::string check = argv[i];
    const auto op = check.find('=');
    const bool at_least = op != std::string::npos && op > 0 && check[op - 1] == '>';
    const std::string colour = check.substr(0, at_least ? op - 1 : op);
    if (colour.size() != 7 || colour[0] != '#' || op == std::string::npos) {
      std::fprintf(stderr, "png_check: bad check '%s'\n", check.c_str());
      return 2;
    }
    const long wanted = std::strtol(colour.c_str() + 1, nullptr, 16);
    const int rgb[3] = {static_cast<int>(wanted >> 16 & 0xff), static_cast<int>(wanted >> 8 & 0xff),
                        static_cast<int>(wanted & 0xff)};
    const long limit = std::atol(check.c_str() + op + 1);
    long found = 0;
    for (std::size_t p = 0; p + 2 < pixels.size(); p += 3) {
      bool close = true;
      for (int c = 0; c < 3; ++c) close = close && std::abs(pixels[p + c] - rgb[c]) <= 24;
      found += close ? 1 : 0;
    }
    const bool holds = at_least ? found >= limit : found == limit;
    std::printf("%s: %ld pixels of %s (%s %ld): %s\n", argv[1], found, colour.c_str(),
                at_least ? "want at least" : "want exactly", limit, holds ? "ok" : "FAILED");
    ok = ok && holds;
  }
  return ok ? 0 : 1;
}
