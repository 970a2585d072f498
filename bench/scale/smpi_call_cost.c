// SMPI's own time per MPI call as a simulated rank sees it: the mean charged time of an all-reduce
// of two doubles at one rank, computation charged with no threshold (smpi/cpu-threshold:0). What
// the simulator does inside a call is measured as the program's computation once it exceeds the
// threshold; run.sh sets the threshold above this figure (docs/scale.md, "How computation is
// charged"). Prints seconds.
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  double v[2] = {1.0, 2.0};
  const int calls = 2000;
  const double t = MPI_Wtime();
  for (int i = 0; i < calls; ++i) MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  printf("%.3g\n", (MPI_Wtime() - t) / calls);
  MPI_Finalize();
  return 0;
}
