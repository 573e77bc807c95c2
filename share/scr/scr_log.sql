-- Tables for SCR's database logging (SCR_LOG_ENABLE=1 SCR_LOG_DB_ENABLE=1), for MariaDB 10.3+
-- or MySQL 8. Load it into the database named by SCR_LOG_DB_NAME:
--
--   mariadb -u root -e "CREATE DATABASE scr"
--   mariadb -u root scr < PREFIX/share/scr/scr_log.sql
--   mariadb -u root -e "CREATE USER 'scr'@'%' IDENTIFIED BY 'secret';
--                       GRANT SELECT, INSERT, UPDATE ON scr.* TO 'scr'@'%'"
--
-- then in /etc/scr/scr.conf (or the environment):
--
--   SCR_LOG_ENABLE=1
--   SCR_LOG_DB_ENABLE=1
--   SCR_LOG_DB_HOST=dbhost[:3306]      (or the server's socket path, e.g. /run/mysqld/mysqld.sock)
--   SCR_LOG_DB_NAME=scr
--   SCR_LOG_DB_USER=scr
--   SCR_LOG_DB_PASS=secret
--
-- Rank 0 of each run writes one `runs` row and one `events` row per event; the commands
-- (scr_list_down_nodes --log) write events with no run. SELECT is not needed by SCR itself;
-- INSERT and UPDATE are (a run completes its row at RUN_START and RUN_END, a job row is
-- shared by its runs). Running this file again keeps the existing rows. All times are UTC.

-- One row per job: the runs of one allocation (resource manager job id) on one prefix.
CREATE TABLE IF NOT EXISTS `jobs` (
  `id`       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `jobid`    VARCHAR(255)    NOT NULL,             -- SCR_JOB_ID, SLURM_JOB_ID, ... or the pid
  `username` VARCHAR(255)    NOT NULL,             -- SCR_USER_NAME, USER, the account database
  `jobname`  VARCHAR(255)    NOT NULL DEFAULT '',  -- SCR_JOB_NAME, SLURM_JOB_NAME, LSB_JOBNAME
  `prefix`   VARCHAR(4096)   NOT NULL,             -- SCR_PREFIX
  `start`    DATETIME(6)     NOT NULL,             -- when its first run started logging
  UNIQUE KEY `job` (`username`(100), `jobid`(100), `prefix`(500))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per run (SCR_Init .. SCR_Finalize).
CREATE TABLE IF NOT EXISTS `runs` (
  `id`         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `job_id`     BIGINT UNSIGNED NOT NULL,
  `host`       VARCHAR(255)    NOT NULL,   -- node of rank 0
  `pid`        INT UNSIGNED    NOT NULL,   -- process id of rank 0
  `ranks`      INT UNSIGNED        NULL,   -- set by RUN_START
  `nodes`      INT UNSIGNED        NULL,   -- set by RUN_START
  `version`    VARCHAR(64)         NULL,   -- set by RUN_START
  `start`      DATETIME(6)     NOT NULL,
  `end`        DATETIME(6)         NULL,   -- NULL: running, or it died without SCR_Finalize
  `secs`       DOUBLE              NULL,   -- from SCR_Init to the end
  `end_reason` VARCHAR(255)        NULL,   -- SCR_FINALIZE_CALLED, or the halt reason
  KEY `job_start` (`job_id`, `start`),
  CONSTRAINT `runs_job` FOREIGN KEY (`job_id`) REFERENCES `jobs` (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per event, the same events as the text log <prefix>/.scr/log:
--   RUN_START RUN_END CKPT_START CKPT_END OUTPUT_START OUTPUT_END FLUSH_START FLUSH_END
--   FLUSH_FAIL FETCH RESTART REBUILD EVICT HALT NODE_FAIL
CREATE TABLE IF NOT EXISTS `events` (
  `id`        BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  `job_id`    BIGINT UNSIGNED NOT NULL,
  `run_id`    BIGINT UNSIGNED     NULL,   -- NULL for an event a command logged
  `time`      DATETIME(6)     NOT NULL,
  `type`      VARCHAR(32)     NOT NULL,
  `dset_id`   BIGINT UNSIGNED     NULL,   -- dataset id
  `dset_name` VARCHAR(1024)       NULL,   -- dataset name (SCR_Start_output)
  `bytes`     BIGINT UNSIGNED     NULL,   -- bytes of the dataset (all ranks)
  `files`     BIGINT UNSIGNED     NULL,   -- files of the dataset (all ranks)
  `secs`      DOUBLE              NULL,   -- duration (CKPT_END, FLUSH_END, FETCH, RUN_END, ...)
  `mibps`     DOUBLE              NULL,   -- bytes / secs in MiB/s
  `status`    VARCHAR(16)         NULL,   -- 'ok' or 'failed' for an event with an outcome
  `note`      TEXT                NULL,   -- the event's other fields, key=value as in the text log
  KEY `job_time` (`job_id`, `time`),
  KEY `run_time` (`run_id`, `time`),
  KEY `type_time` (`type`, `time`),
  CONSTRAINT `events_job` FOREIGN KEY (`job_id`) REFERENCES `jobs` (`id`),
  CONSTRAINT `events_run` FOREIGN KEY (`run_id`) REFERENCES `runs` (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
