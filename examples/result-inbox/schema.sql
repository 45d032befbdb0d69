-- Result-inbox receiver: the receiver's OWN database, never the platform's.
-- Generation 1: two tables, 17 columns. Generation 2 (K-13): the ACK intents
-- table. No foreign keys, no cascading deletes.
-- `receiver init` creates every table on an empty database and, on a
-- database that holds exactly the tables of an earlier generation, creates
-- only the tables added since; it never alters or repairs existing tables.

CREATE TABLE receiver_inbox (
  consumer_name VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '接收用途名称（RECEIVER_NAME），重启与扩容复用同一名称',
  queue_id      CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '来源队列ID，32位小写十六进制',
  event_id      CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '平台结果事件ID，去重身份',
  event_sha256  CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '规范化完整事件JSON的SHA256摘要',
  event_json    MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT '冻结的规范化事件JSON原文',
  applied       TINYINT(1)   NOT NULL COMMENT '该事件是否推进了任务结果视图：1推进，0未推进（旧版本）',
  received_at   DATETIME(6)  NOT NULL COMMENT '首次受理时间，UTC',
  PRIMARY KEY (consumer_name, queue_id, event_id)
) ENGINE=InnoDB COMMENT='结果事件Inbox：每个接收用途每个事件一行';

CREATE TABLE receiver_task_views (
  consumer_name   VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '接收用途名称（RECEIVER_NAME）',
  queue_id        CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '来源队列ID',
  task_id         CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '任务ID',
  task_revision   BIGINT UNSIGNED NOT NULL COMMENT '已应用的最大任务版本；事务内占位为0，提交后不保留占位',
  last_event_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '推进视图的最后事件ID',
  last_state      VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '最后状态：SUCCEEDED、FAILED、CANCELLED、NEEDS_REVIEW（待核查，不是成功）',
  last_result     MEDIUMTEXT      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT '最后结果原始JSON文本，保留大整数精度；无结果时为NULL',
  applied_events  INT             NOT NULL COMMENT '实际推进视图的事件次数',
  created_at      DATETIME(6)     NOT NULL COMMENT '视图创建时间，UTC',
  updated_at      DATETIME(6)     NOT NULL COMMENT '视图最后推进时间，UTC',
  PRIMARY KEY (consumer_name, queue_id, task_id)
) ENGINE=InnoDB COMMENT='任务结果视图：接收方只读模型，不是平台权威任务状态';

-- generation 2
CREATE TABLE receiver_ack_intents (
  consumer_name   VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '接收用途名称（RECEIVER_NAME）',
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '交付所属订阅ID',
  delivery_id     CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '平台交付ID',
  epoch           BIGINT UNSIGNED NOT NULL COMMENT '租约纪元，ACK证明的一部分',
  lease_secret    VARCHAR(128)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '租约密钥，ACK证明的一部分；只存于接收方库，绝不写入日志',
  event_id        CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '该交付的结果事件ID',
  created_at      DATETIME(6)     NOT NULL COMMENT '与业务变更同事务写入的时间，UTC',
  PRIMARY KEY (consumer_name, subscription_id, delivery_id)
) ENGINE=InnoDB COMMENT='ACK意图：业务提交后待平台确认的ACK证明，确认后删除';
