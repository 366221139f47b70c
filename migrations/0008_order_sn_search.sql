-- 0008: find a task by its order number (issue 28 item 3).
--
-- The task search of the admin pages also matches order_submissions.order_sn (the number the phone read on
-- its 待付款 list, migration 0006). A partial index: most rows fenced before a result carry no number.
CREATE INDEX order_submissions_order_sn ON order_submissions(order_sn) WHERE order_sn IS NOT NULL;
