// Runs after every e2e spec file (jest's setupFilesAfterEnv; its afterAll comes after the spec's
// own). A service process or an in-process app that a spec left running would go on sweeping,
// admitting and flushing on the database the next spec of this jest worker starts from: it is
// stopped here, and the spec that left it fails, saying what it left.
import { stopServicesLeftRunning } from '../../harness/launcher';
import { closeAppsLeftOpen } from './left-open';

afterAll(async () => {
  const ports = await stopServicesLeftRunning();
  const apps = await closeAppsLeftOpen();
  const left = [
    ...(ports.length > 0 ? [`${ports.length} service process(es) (ports ${ports.join(', ')})`] : []),
    ...(apps > 0 ? [`${apps} in-process app(s)`] : []),
  ];
  if (left.length > 0) throw new Error(`this spec left ${left.join(' and ')} running: stop them in an afterAll`);
});
