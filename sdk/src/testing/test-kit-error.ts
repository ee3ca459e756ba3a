/** The failure of one test-kit call: which operation, and what the participant answered. */
export class TestKitError extends Error {
  /** The operation that failed (`prepare`, `commit`, `restore`, `POST /verify`, ...). */
  readonly operation: string;
  /** The HTTP status of the reply, or null when none came (timeout, connection refused). */
  readonly status: number | null;
  /** The participant's reply body, or null when none came. */
  readonly reply: unknown;

  constructor(
    operation: string,
    problem: string,
    reply: { status: number | null; body: unknown } = { status: null, body: null },
    options?: ErrorOptions,
  ) {
    const answered =
      reply.status === null ? "" : ` (HTTP ${reply.status}: ${JSON.stringify(reply.body)})`;
    super(`${operation} ${problem}${answered}`, options);
    this.name = "TestKitError";
    this.operation = operation;
    this.status = reply.status;
    this.reply = reply.body;
  }
}
