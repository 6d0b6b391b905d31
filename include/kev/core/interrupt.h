// Cooperative interruption: SIGINT/SIGTERM set a flag; long loops call check_interrupted(),
// which throws Error(kInterrupted) so RAII (e.g. StagingDir) cleans up on the way out.
#pragma once

namespace kev {

void install_interrupt_handlers();
bool interrupted();
void check_interrupted();  // throws Error(kInterrupted, "interrupted by signal N")

}  // namespace kev
