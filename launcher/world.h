// The process's MPI runtime, when it was started by an MPI launcher (mpirun, srun): created
// once by main, outside the error handling that aborts the job, so that no rank waits in
// MPI_Finalize for a rank that is gone.
#pragma once

namespace linnet {
class MpiRuntime;
}

namespace linnet::cli {

// nullptr when not started by an MPI launcher (or built without MPI).
const MpiRuntime* mpi_runtime();
void set_mpi_runtime(const MpiRuntime* rt);

}  // namespace linnet::cli
