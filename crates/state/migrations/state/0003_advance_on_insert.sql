-- Recording an event is one statement: inserting it moves the resume point in the same
-- statement (so in the same implicit transaction), instead of an explicit transaction of two.
CREATE TRIGGER processed_events_advance AFTER INSERT ON processed_events
BEGIN
    UPDATE stream_position SET last_seq = MAX(last_seq, NEW.seq) WHERE singleton = 1;
END;
