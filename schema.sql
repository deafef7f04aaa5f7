-- localrag schema (seed 000). Applied idempotently by `localrag db init`; mounted by compose.yaml for fresh volumes.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS documents (
  id BIGSERIAL PRIMARY KEY,
  vault_path TEXT NOT NULL,
  file_path TEXT NOT NULL,
  relative_path TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  mtime_ns BIGINT,
  size_bytes BIGINT,
  frontmatter JSONB NOT NULL DEFAULT '{}'::jsonb,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (vault_path, relative_path)
);

CREATE TABLE IF NOT EXISTS chunks (
  id BIGSERIAL PRIMARY KEY,
  document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  chunk_index INTEGER NOT NULL,
  content TEXT NOT NULL,
  file_path TEXT NOT NULL,
  relative_path TEXT NOT NULL,
  heading_path TEXT[] NOT NULL DEFAULT ARRAY[]::text[],
  frontmatter JSONB NOT NULL DEFAULT '{}'::jsonb,
  tags TEXT[] NOT NULL DEFAULT ARRAY[]::text[],
  wikilinks TEXT[] NOT NULL DEFAULT ARRAY[]::text[],
  metadata JSONB NOT NULL DEFAULT '{}'::jsonb,
  content_hash TEXT NOT NULL,
  token_count INTEGER,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (document_id, chunk_index)
);

CREATE TABLE IF NOT EXISTS embeddings (
  id BIGSERIAL PRIMARY KEY,
  chunk_id BIGINT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
  embedding_provider TEXT NOT NULL,
  embedding_model TEXT NOT NULL,
  embedding_dim INTEGER NOT NULL CHECK (embedding_dim = 1024),
  text_version TEXT NOT NULL DEFAULT 'v1',
  embedding vector(1024) NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (chunk_id, embedding_provider, embedding_model, embedding_dim)
);

-- Which text of its chunk the vector was made from (the embedder's text_version; 'v1': every vector made before
-- version 8, and the fake embedder's own features): ingest re-embeds a chunk whose vector is of another text.
-- Added only when missing (version 8); a constant default is set without rewriting the table.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'embeddings'::regclass AND attname = 'text_version'
                 AND NOT attisdropped) THEN
    ALTER TABLE embeddings ADD COLUMN text_version TEXT NOT NULL DEFAULT 'v1';
  END IF;
END
$$;

-- A 1024-dim vector is 4 KB: keep it in the row instead of TOAST, so the exact scan reads one relation, not two.
-- Only when not yet so: ALTER TABLE takes an exclusive lock, and a `db init` queued behind a running ingest with
-- that lock pending would stall every search.
DO $$
BEGIN
  IF (SELECT attstorage FROM pg_attribute WHERE attrelid = 'embeddings'::regclass AND attname = 'embedding') <> 'p'
  THEN
    ALTER TABLE embeddings ALTER COLUMN embedding SET STORAGE PLAIN;
  END IF;
END
$$;

CREATE TABLE IF NOT EXISTS ingest_runs (
  id BIGSERIAL PRIMARY KEY,
  vault_path TEXT NOT NULL,
  embedding_provider TEXT NOT NULL,
  embedding_model TEXT NOT NULL,
  embedding_dim INTEGER NOT NULL CHECK (embedding_dim = 1024),
  status TEXT NOT NULL CHECK (status IN ('running', 'success', 'failed')),
  started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  finished_at TIMESTAMPTZ,
  documents_added INTEGER NOT NULL DEFAULT 0,
  documents_updated INTEGER NOT NULL DEFAULT 0,
  documents_deleted INTEGER NOT NULL DEFAULT 0,
  documents_skipped INTEGER NOT NULL DEFAULT 0,
  chunks_written INTEGER NOT NULL DEFAULT 0,
  embeddings_written INTEGER NOT NULL DEFAULT 0,
  error_summary TEXT,
  metadata JSONB NOT NULL DEFAULT '{}'::jsonb
);

-- [[wikilinks]] as written, and where they lead by Obsidian's rules (resolved after each ingest that changed notes;
-- target_exists NULL = not resolved yet, false = no such file: Obsidian would create resolved_path).
CREATE TABLE IF NOT EXISTS links (
  id BIGSERIAL PRIMARY KEY,
  document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  target TEXT NOT NULL,
  heading TEXT NOT NULL DEFAULT '',
  block_id TEXT NOT NULL DEFAULT '',
  alias TEXT NOT NULL DEFAULT '',
  embed BOOLEAN NOT NULL DEFAULT false,
  resolved_path TEXT,
  target_exists BOOLEAN
);

-- The note's text (frontmatter removed) and the file line it starts on: `localrag show`, GET /notes and the MCP
-- get_note tool read notes from here, never from a path on disk; chunk line ranges are counted in file lines.
-- Added only when missing, for the same reason as above (ADD COLUMN IF NOT EXISTS still takes the exclusive lock).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'documents'::regclass AND attname = 'body'
                 AND NOT attisdropped) THEN
    ALTER TABLE documents ADD COLUMN body TEXT;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'documents'::regclass AND attname = 'body_line'
                 AND NOT attisdropped) THEN
    ALTER TABLE documents ADD COLUMN body_line INTEGER;
  END IF;
END
$$;

CREATE INDEX IF NOT EXISTS idx_documents_content_hash ON documents (content_hash);
CREATE INDEX IF NOT EXISTS idx_links_document_id ON links (document_id);
CREATE INDEX IF NOT EXISTS idx_links_resolved_path ON links (resolved_path);
CREATE INDEX IF NOT EXISTS idx_chunks_document_id ON chunks (document_id);
CREATE INDEX IF NOT EXISTS idx_chunks_relative_path ON chunks (relative_path);
CREATE INDEX IF NOT EXISTS idx_chunks_content_hash ON chunks (content_hash);
CREATE INDEX IF NOT EXISTS idx_embeddings_config
  ON embeddings (embedding_provider, embedding_model, embedding_dim);

-- One row per `ask` (CLI and HTTP): what was asked, retrieved, sent and answered (seed 002's snapshots).
-- Append-only: no foreign keys (re-ingesting deletes chunks; a record keeps their ids and content hashes), and a
-- trigger refuses UPDATE and DELETE.  request_body is TEXT so that request_sha256 stays the hash of its bytes.
CREATE TABLE IF NOT EXISTS answers (
  id BIGSERIAL PRIMARY KEY,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  question TEXT NOT NULL,
  mode TEXT NOT NULL,
  reason TEXT NOT NULL,
  retrieval JSONB NOT NULL DEFAULT '{}'::jsonb,
  gate JSONB NOT NULL DEFAULT '{}'::jsonb,
  evidence JSONB NOT NULL DEFAULT '[]'::jsonb,
  excluded JSONB NOT NULL DEFAULT '[]'::jsonb,
  prompt_version TEXT,
  request_body TEXT,
  request_sha256 TEXT,
  llm_provider TEXT,
  model TEXT,
  completion_status TEXT NOT NULL,
  finish_reason TEXT,
  error_code TEXT,
  usage JSONB,
  answer TEXT NOT NULL,
  claims JSONB NOT NULL DEFAULT '[]'::jsonb,
  citation_check JSONB,
  latency_ms JSONB NOT NULL DEFAULT '{}'::jsonb
);

CREATE OR REPLACE FUNCTION localrag_answers_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'answers are append-only: % is not allowed', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE OR REPLACE TRIGGER answers_append_only BEFORE UPDATE OR DELETE ON answers
  FOR EACH ROW EXECUTE FUNCTION localrag_answers_append_only();

-- The error's code when an ask failed (completion_status 'error'): what the CLI and HTTP error showed, e.g.
-- llm_timeout; never a message (an upstream's text may echo a key).  Added only when missing (version 7).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'answers'::regclass AND attname = 'error_code'
                 AND NOT attisdropped) THEN
    ALTER TABLE answers ADD COLUMN error_code TEXT;
  END IF;
END
$$;

-- The keyword channel (BM25 over content + heading path + file name + tags), maintained by ingest in the same
-- transactions as the chunks.  Each query term's document frequency is counted at query time (index-only); N and
-- the total length come from keyword_stats, which triggers keep in the same transactions, so neither can drift
-- from the chunks.
CREATE TABLE IF NOT EXISTS keyword_chunks (
  chunk_id BIGINT PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
  tokenizer TEXT NOT NULL,
  length REAL NOT NULL
);

-- Postings follow their keyword_chunks row by triggers rather than a foreign key: a foreign key checks each of the
-- ~46 postings per chunk as it is copied in (measured: a third of the keyword index's ingest cost); the triggers
-- act once per deleting statement, also when a chunk's deletion cascades or a TRUNCATE ... CASCADE reaches here.
CREATE TABLE IF NOT EXISTS keyword_postings (
  chunk_id BIGINT NOT NULL,
  term TEXT COLLATE "C" NOT NULL,
  tf REAL NOT NULL,
  dl REAL NOT NULL,
  PRIMARY KEY (chunk_id, term)
);

CREATE OR REPLACE FUNCTION localrag_keyword_postings_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM keyword_postings p USING gone g WHERE p.chunk_id = g.chunk_id;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION localrag_keyword_postings_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM keyword_postings;  -- not TRUNCATE: the statement that fired this may be truncating it as well
  RETURN NULL;
END $$;

-- N and the summed length of keyword_chunks, for BM25 without a scan per search (counting 258k rows took ~17 ms of
-- every search): each statement that adds or deletes keyword_chunks rows appends its delta here (inserts only, so
-- concurrent ingests never wait on one row); a search sums the rows, and ingest folds them into one at its end.
CREATE TABLE IF NOT EXISTS keyword_stats (
  id BIGSERIAL PRIMARY KEY,
  chunks BIGINT NOT NULL,
  total_length DOUBLE PRECISION NOT NULL
);

-- Both triggers name their transition table `changed`: added rows count up, deleted rows down.
CREATE OR REPLACE FUNCTION localrag_keyword_stats_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  sign INTEGER := CASE TG_OP WHEN 'DELETE' THEN -1 ELSE 1 END;
BEGIN
  INSERT INTO keyword_stats (chunks, total_length)
    SELECT sign * count(*), sign * coalesce(sum(length::float8), 0) FROM changed HAVING count(*) > 0;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION localrag_keyword_stats_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM keyword_stats;
  RETURN NULL;
END $$;

-- Created only when missing: CREATE/DROP TRIGGER lock the table, and `db init` must not wait behind an ingest.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'keyword_chunks'::regclass
                 AND tgname = 'keyword_chunks_stats_insert') THEN
    CREATE TRIGGER keyword_chunks_stats_insert AFTER INSERT ON keyword_chunks REFERENCING NEW TABLE AS changed
      FOR EACH STATEMENT EXECUTE FUNCTION localrag_keyword_stats_change();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'keyword_chunks'::regclass
                 AND tgname = 'keyword_chunks_stats_delete') THEN
    CREATE TRIGGER keyword_chunks_stats_delete AFTER DELETE ON keyword_chunks REFERENCING OLD TABLE AS changed
      FOR EACH STATEMENT EXECUTE FUNCTION localrag_keyword_stats_change();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'keyword_chunks'::regclass
                 AND tgname = 'keyword_chunks_stats_truncate') THEN
    CREATE TRIGGER keyword_chunks_stats_truncate AFTER TRUNCATE ON keyword_chunks
      FOR EACH STATEMENT EXECUTE FUNCTION localrag_keyword_stats_truncate();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'keyword_chunks'::regclass
                 AND tgname = 'keyword_chunks_delete') THEN
    CREATE TRIGGER keyword_chunks_delete AFTER DELETE ON keyword_chunks REFERENCING OLD TABLE AS gone
      FOR EACH STATEMENT EXECUTE FUNCTION localrag_keyword_postings_delete();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'keyword_chunks'::regclass
                 AND tgname = 'keyword_chunks_truncate') THEN
    CREATE TRIGGER keyword_chunks_truncate AFTER TRUNCATE ON keyword_chunks
      FOR EACH STATEMENT EXECUTE FUNCTION localrag_keyword_postings_truncate();
  END IF;
END $$;

-- Query terms are looked up here; chunk_id, tf and the chunk length ride in the index (index-only scans).
CREATE INDEX IF NOT EXISTS idx_keyword_postings_term ON keyword_postings (term) INCLUDE (chunk_id, tf, dl);

-- Tickets: knowledge gaps a person confirmed (a draft is never stored).  A ticket is never deleted, and every
-- status change is one append-only event: who (cli, or http with a fingerprint of the bearer token, never the
-- token), when, old and new status, an optional note.
CREATE TABLE IF NOT EXISTS tickets (
  id BIGSERIAL PRIMARY KEY,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  title TEXT NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
  description TEXT NOT NULL CHECK (char_length(description) <= 20000),
  category TEXT NOT NULL,
  question TEXT,
  answer_id BIGINT,
  status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'in_progress', 'resolved')),
  draft JSONB NOT NULL DEFAULT '{}'::jsonb
);

CREATE TABLE IF NOT EXISTS ticket_events (
  id BIGSERIAL PRIMARY KEY,
  ticket_id BIGINT NOT NULL REFERENCES tickets(id),
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  actor TEXT NOT NULL CHECK (actor IN ('cli', 'http')),
  token_fingerprint TEXT,
  old_status TEXT,
  new_status TEXT NOT NULL,
  note TEXT
);
CREATE INDEX IF NOT EXISTS idx_ticket_events_ticket ON ticket_events (ticket_id, id);

CREATE OR REPLACE FUNCTION localrag_tickets_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is not allowed on %', TG_OP, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE OR REPLACE TRIGGER tickets_no_delete BEFORE DELETE ON tickets
  FOR EACH ROW EXECUTE FUNCTION localrag_tickets_no_delete();
CREATE OR REPLACE TRIGGER ticket_events_append_only BEFORE UPDATE OR DELETE ON ticket_events
  FOR EACH ROW EXECUTE FUNCTION localrag_tickets_no_delete();

CREATE INDEX IF NOT EXISTS idx_ingest_runs_vault ON ingest_runs (vault_path, id);

-- The schema's version (one row per version applied).  `localrag db init` upgrades an older schema in place;
-- every command refuses a newer one.  Version 1 (the first release) had no such table.
CREATE TABLE IF NOT EXISTS localrag_schema (
  version INTEGER PRIMARY KEY,
  applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO localrag_schema (version) VALUES (8) ON CONFLICT (version) DO NOTHING;
