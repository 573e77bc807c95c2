// Directory listings and tree removal of checkpoint files, as a C++17 application does them
// (directory_iterator, recursive_directory_iterator, file_size, canonical, remove_all),
// printing what it sees; run with and without transparent mode, the printed lines must be
// the same. Knows nothing of SCR. Usage: listing DIR
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fs::path top = argv[1];
  fs::path mine = top / "ckpt.1" / ("r" + std::to_string(rank));
  auto out = [&](const std::string &s) {
    std::ostringstream line;
    line << "r" << rank << " " << s << "\n";
    std::cout << line.str() << std::flush;
  };
  if (rank == 0) fs::create_directory(top / "ckpt.1");
  MPI_Barrier(MPI_COMM_WORLD);
  fs::create_directories(mine / "sub");
  for (auto [name, text] : {std::pair{"f", "checkpoint"}, {"a", "aa"}, {"sub/c", "ccc"}, {"notes.txt", "not ckpt"}}) {
    std::ofstream(mine / name) << text;
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the checkpoint is complete

  std::set<std::string> names;
  for (auto &e : fs::directory_iterator(mine))
    names.insert(e.path().filename().string() + (e.is_directory() ? "/" : ":" + std::to_string(e.file_size())));
  std::string line = "ls";
  for (auto &n : names) line += " " + n;
  out(line);
  std::set<std::string> tree;
  for (auto &e : fs::recursive_directory_iterator(mine))
    tree.insert(fs::relative(e.path(), top).string() + (e.is_regular_file() ? ":" + std::to_string(e.file_size()) : ""));
  line = "tree";
  for (auto &n : tree) line += " " + n;
  out(line);
  out("canonical " + fs::relative(fs::canonical(mine / "sub" / ".." / "f"), fs::canonical(top)).string());
  auto removed = fs::remove_all(mine);
  out("removed " + std::to_string(removed) + " exists " + std::to_string(fs::exists(mine / "f")) +
      std::to_string(fs::exists(mine)));
  MPI_Barrier(MPI_COMM_WORLD);  // a sync point: the removal reaches SCR's dataset
  out("after-sync exists " + std::to_string(fs::exists(mine / "f")) + " left " +
      std::to_string(std::distance(fs::directory_iterator(top / "ckpt.1"), fs::directory_iterator())));
  MPI_Finalize();
  return 0;
}
