-- +goose Up
-- What a step needs to know that step_tries did not say:
--   step_requested: the provider took the current step's call. A counted
--   try was taken for it, but a failed call counts a try too: a reboot
--   whose calls all failed went back to running as if done.
--   reboot_target: the reboot generation the current boot or reboot ends,
--   taken when the instance moves to provisioning or rebooting. The move
--   to running took the generation as it was then, so a reboot asked for
--   during a reboot was taken as done by it; and a boot (a start) did not
--   end the reboots asked before it, so a reboot that had failed came back
--   after the next start.
ALTER TABLE instances ADD COLUMN step_requested boolean NOT NULL DEFAULT false;
ALTER TABLE instances ADD COLUMN reboot_target integer NOT NULL DEFAULT 0;
-- Steps under way: as the old rules read them.
UPDATE instances SET step_requested = true WHERE state IN ('provisioning', 'stopping', 'rebooting', 'deleting') AND step_tries > 0;
UPDATE instances SET reboot_target = reboot_generation WHERE state IN ('provisioning', 'rebooting');

-- +goose Down
ALTER TABLE instances DROP COLUMN reboot_target;
ALTER TABLE instances DROP COLUMN step_requested;
