// einshard-explain: what a sharding notation will do on a mesh, before it runs on a cluster.
//   einshard-explain "b n c, h/tp c -> b n h/tp" --mesh dp=2,tp=4 --shape b=8,n=128,c=1024,h=4096
// Exit status: 0 plan printed, 1 no plan (planner error), 2 malformed notation, 64 bad command line.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "explain.hpp"

int main(int argc, char** argv) {
  namespace tools = einshard::tools;
  try {
    const auto request = tools::parse_arguments(std::vector<std::string>(argv + 1, argv + argc));
    if (request.notation.empty()) {
      std::fputs(tools::usage_text(), stdout);
      return 0;
    }
    std::fputs((request.json ? tools::explain_json(request) : tools::explain_text(request)).c_str(), stdout);
    return 0;
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 64;
  } catch (const einshard::NotationError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
