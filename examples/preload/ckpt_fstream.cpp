// A C++ MPI application that knows nothing of SCR: std::ofstream checkpoints
// ckpt.<step>/rank_<r>.dat, std::filesystem for directories, sizes and the atomic
// rename of the "latest" pointer, restart verified byte by byte.
// Usage: ckpt_fstream DIR STEPS [CRASH_AT]
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

static std::vector<char> content(int step, int rank) {
  std::vector<char> v(40000);
  for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<char>((i * 31 + step * 7 + rank * 13) & 0xff);
  return v;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  fs::path dir = argv[1];
  int steps = std::stoi(argv[2]);
  int crash_at = argc > 3 ? std::stoi(argv[3]) : -1;
  auto file = [&](int step) { return dir / ("ckpt." + std::to_string(step)) / ("rank_" + std::to_string(rank) + ".dat"); };

  int start = 0;
  if (fs::exists(dir / "latest")) std::ifstream(dir / "latest") >> start;
  if (start > 0) {
    int ok = fs::exists(file(start)) && fs::file_size(file(start)) == content(start, rank).size();
    if (ok) {
      std::ifstream in(file(start), std::ios::binary);
      std::vector<char> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ok = got == content(start, rank);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) std::cout << "RESTARTED " << start << (all ? " verified" : " CORRUPT") << std::endl;
  } else if (rank == 0) {
    std::cout << "NO_RESTART" << std::endl;
  }
  for (int step = start + 1; step <= steps; step++) {
    if (step == crash_at && rank == size - 1) _exit(9);
    MPI_Barrier(MPI_COMM_WORLD);
    if (step % 2) continue;
    fs::create_directories(dir / ("ckpt." + std::to_string(step)));
    {
      std::ofstream out(file(step), std::ios::binary | std::ios::trunc);
      auto v = content(step, rank);
      out.write(v.data(), static_cast<std::streamsize>(v.size()));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      std::ofstream(dir / "latest.tmp") << step << "\n";
      fs::rename(dir / "latest.tmp", dir / "latest");
      std::cout << "CHECKPOINT " << step << std::endl;
    }
  }
  if (rank == 0) std::cout << "DONE" << std::endl;
  MPI_Finalize();
  return 0;
}
