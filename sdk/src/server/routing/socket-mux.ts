/**
 * Many byte streams over one socket. Session routing passes requests between the workers of a
 * server: one socket per request would hold two more file descriptors on each worker for as long
 * as the request runs (a rollout parked for minutes holds them all that time), and at 16,000
 * rollouts in flight that alone passes the per-process limit. Over a mux, each worker pair
 * shares one socket, and each passed-on request is a {@link MuxStream}: an HTTP/1.1 exchange
 * runs over it unchanged (the client side through `createConnection`, the owner's HTTP server
 * through its `connection` event).
 *
 * ## Frames
 * `u32 stream ID, u8 type, u32 length, bytes`; types: data, end (no more data from this side),
 * reset (the stream is gone). The side that opens a stream picks its ID.
 *
 * @see docs/workers.md
 */
import { Duplex } from "node:stream";
import type { Socket } from "node:net";

const DATA = 0;
const END = 1;
const RESET = 2;
const HEADER_BYTES = 9;

/** One stream of a {@link SocketMux}: a duplex that quacks enough like a socket for `node:http`. */
export class MuxStream extends Duplex {
  readonly id: number;
  readonly #mux: SocketMux;
  #remoteEnded = false;
  #localEnded = false;
  #reset = false;

  constructor(mux: SocketMux, id: number) {
    super({ allowHalfOpen: true });
    this.id = id;
    this.#mux = mux;
  }

  // What `node:http` asks of a socket; a mux stream has no timers, Nagle or keep-alive probes.
  readonly remoteAddress = "127.0.0.1";
  readonly remotePort = 0;
  readonly localAddress = "127.0.0.1";
  readonly localPort = 0;
  readonly encrypted = false;
  setTimeout(_ms: number, callback?: () => void): this {
    if (callback !== undefined) this.once("timeout", callback);
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }

  override _read(): void {}

  override _write(
    chunk: Buffer,
    _encoding: BufferEncoding,
    done: (error?: Error | null) => void,
  ): void {
    this.#mux.send(this.id, DATA, chunk);
    done();
  }

  override _final(done: (error?: Error | null) => void): void {
    this.#localEnded = true;
    this.#mux.send(this.id, END);
    this.#settleIfDone();
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    // A side that sent all it had (END) owes the peer nothing more: a reset now could reach the
    // peer before it has read that last data.
    if (!this.#reset && !this.#localEnded) this.#mux.send(this.id, RESET);
    this.#mux.forget(this.id);
    done(error);
  }

  /** Data from the peer. */
  received(bytes: Buffer): void {
    this.push(bytes);
  }

  /** The peer sends no more. */
  remoteEnd(): void {
    this.#remoteEnded = true;
    this.push(null);
    this.#settleIfDone();
  }

  /** The peer dropped the stream (or the mux is gone): `error` names why. */
  remoteReset(error: Error): void {
    this.#reset = true;
    // Everything the peer sent has arrived (END came first): let it be read, not destroyed.
    if (this.#remoteEnded) return;
    this.destroy(error);
  }

  #settleIfDone(): void {
    if (this.#localEnded && this.#remoteEnded) this.#mux.forget(this.id);
  }
}

/** Streams over one socket; see the module comment. */
export class SocketMux {
  readonly #socket: Socket;
  readonly #streams = new Map<number, MuxStream>();
  readonly #onStream: ((stream: MuxStream) => void) | null;
  #nextId = 1;
  #pending: Buffer[] = [];
  #buffered = 0;
  #gone: Error | null = null;

  /**
   * @param onStream called with each stream the peer opens (the owner's side); null for a side
   *   that only opens streams
   */
  constructor(socket: Socket, onStream: ((stream: MuxStream) => void) | null = null) {
    this.#socket = socket;
    this.#onStream = onStream;
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    socket.on("error", (error) => this.#fail(error));
    socket.on("close", () => this.#fail(new Error("the worker's stream socket closed")));
  }

  /** Streams open now. */
  get size(): number {
    return this.#streams.size;
  }

  /** Whether the socket is gone (every stream was reset). */
  get closed(): boolean {
    return this.#gone !== null;
  }

  /** Opens a stream to the peer. */
  open(): MuxStream {
    const stream = new MuxStream(this, this.#nextId++);
    if (this.#gone !== null) {
      const gone = this.#gone;
      process.nextTick(() => stream.remoteReset(gone));
      return stream;
    }
    this.#streams.set(stream.id, stream);
    return stream;
  }

  /** Ends the socket; open streams are reset. */
  close(): void {
    this.#socket.destroy();
    this.#fail(new Error("the stream socket was closed"));
  }

  /** @internal a stream's frame */
  send(id: number, type: number, bytes?: Buffer): void {
    if (this.#gone !== null) return;
    const header = Buffer.allocUnsafe(HEADER_BYTES);
    header.writeUInt32BE(id, 0);
    header[4] = type;
    header.writeUInt32BE(bytes?.length ?? 0, 5);
    this.#socket.write(header);
    if (bytes !== undefined && bytes.length > 0) this.#socket.write(bytes);
  }

  /** @internal a stream that ended both ways or was reset */
  forget(id: number): void {
    this.#streams.delete(id);
  }

  #receive(chunk: Buffer): void {
    this.#pending.push(chunk);
    this.#buffered += chunk.length;
    for (;;) {
      if (this.#buffered < HEADER_BYTES) return;
      const head = this.#peek(HEADER_BYTES);
      const length = head.readUInt32BE(5);
      if (this.#buffered < HEADER_BYTES + length) return;
      const frame = this.#take(HEADER_BYTES + length);
      this.#dispatch(frame.readUInt32BE(0), frame[4] as number, frame.subarray(HEADER_BYTES));
    }
  }

  #dispatch(id: number, type: number, bytes: Buffer): void {
    let stream = this.#streams.get(id);
    if (stream === undefined) {
      // A stream the peer opens starts with data; an end or reset of one already gone is late.
      if (type !== DATA || this.#onStream === null) return;
      stream = new MuxStream(this, id);
      this.#streams.set(id, stream);
      this.#onStream(stream);
    }
    if (type === DATA) stream.received(bytes);
    else if (type === END) stream.remoteEnd();
    else stream.remoteReset(new Error("the peer dropped the stream"));
  }

  #peek(bytes: number): Buffer {
    if ((this.#pending[0] as Buffer).length < bytes) this.#pending = [Buffer.concat(this.#pending)];
    return (this.#pending[0] as Buffer).subarray(0, bytes);
  }

  #take(bytes: number): Buffer {
    const joined =
      this.#pending.length === 1 ? (this.#pending[0] as Buffer) : Buffer.concat(this.#pending);
    const taken = joined.subarray(0, bytes);
    const rest = joined.subarray(bytes);
    this.#pending = rest.length === 0 ? [] : [rest];
    this.#buffered = rest.length;
    return taken;
  }

  #fail(error: Error): void {
    if (this.#gone !== null) return;
    this.#gone = error;
    for (const stream of [...this.#streams.values()]) stream.remoteReset(error);
    this.#streams.clear();
  }
}
