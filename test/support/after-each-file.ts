// Runs after every e2e spec file (jest's setupFilesAfterEnv; its afterAll comes after the spec's
// own). A service process a spec left running would go on sweeping, admitting and flushing on the
// database the next spec of this jest worker starts from: it is stopped here, and the spec that
// left it fails, naming the ports.
import { stopServicesLeftRunning } from '../../harness/launcher';

afterAll(async () => {
  const ports = await stopServicesLeftRunning();
  if (ports.length > 0)
    throw new Error(
      `this spec left ${ports.length} service process(es) running (ports ${ports.join(', ')}): stop them`,
    );
});
