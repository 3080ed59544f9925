/**
 * WebSocket framing (RFC 6455 section 5) for the relay's backend side (client
 * role: masked out, unmasked in) and for test backends (server role).
 *
 * Owns frame encoding, incremental decoding with strict validation (no
 * extensions, so RSV bits must be clear; control frames short and final;
 * masking per role; a payload cap) and close-frame payloads. Knows nothing of
 * sockets.
 *
 * @module
 */

export const OP_CONTINUATION = 0x0;
export const OP_TEXT = 0x1;
export const OP_BINARY = 0x2;
export const OP_CLOSE = 0x8;
export const OP_PING = 0x9;
export const OP_PONG = 0xa;

/** A protocol violation by the peer; `code` is the close code to answer with. */
export class WsProtocolError extends Error {
  override name = "WsProtocolError";
  readonly code: number;
  constructor(message: string, code = 1002) {
    super(message);
    this.code = code;
  }
}

export interface WsFrame {
  readonly fin: boolean;
  readonly opcode: number;
  readonly payload: Uint8Array;
}

/** Encodes one frame; `mask` is required from a client, forbidden from a server. */
export function encodeFrame(
  opcode: number,
  payload: Uint8Array,
  options: { mask: boolean; fin?: boolean },
): Uint8Array {
  const length = payload.length;
  const lengthBytes = length < 126 ? 0 : length < 65536 ? 2 : 8;
  const maskBytes = options.mask ? 4 : 0;
  const out = new Uint8Array(2 + lengthBytes + maskBytes + length);
  out[0] = (options.fin === false ? 0 : 0x80) | opcode;
  const maskBit = options.mask ? 0x80 : 0;
  let offset = 2;
  if (lengthBytes === 0) {
    out[1] = maskBit | length;
  } else if (lengthBytes === 2) {
    out[1] = maskBit | 126;
    out[2] = length >> 8;
    out[3] = length & 0xff;
    offset = 4;
  } else {
    out[1] = maskBit | 127;
    const view = new DataView(out.buffer);
    view.setUint32(2, Math.floor(length / 2 ** 32));
    view.setUint32(6, length >>> 0);
    offset = 10;
  }
  if (!options.mask) {
    out.set(payload, offset);
    return out;
  }
  const key = crypto.getRandomValues(new Uint8Array(4));
  out.set(key, offset);
  offset += 4;
  for (let i = 0; i < length; i++) {
    out[offset + i] = (payload[i] as number) ^ (key[i & 3] as number);
  }
  return out;
}

/** The payload of a close frame; no code means an empty payload (seen as 1005). */
export function encodeClosePayload(code?: number, reason = ""): Uint8Array {
  if (code === undefined) return new Uint8Array(0);
  const text = new TextEncoder().encode(reason).subarray(0, 123);
  const out = new Uint8Array(2 + text.length);
  out[0] = code >> 8;
  out[1] = code & 0xff;
  out.set(text, 2);
  return out;
}

/** Reads a close payload: 1005 (no status) when empty. */
export function decodeClosePayload(payload: Uint8Array): { code: number; reason: string } {
  if (payload.length === 0) return { code: 1005, reason: "" };
  if (payload.length === 1) throw new WsProtocolError("Cannot parse close frame: 1-byte payload");
  const code = ((payload[0] as number) << 8) | (payload[1] as number);
  let reason: string;
  try {
    reason = new TextDecoder("utf-8", { fatal: true }).decode(payload.subarray(2));
  } catch {
    throw new WsProtocolError("Cannot parse close reason: invalid UTF-8", 1007);
  }
  return { code, reason };
}

/** Codes an endpoint may put in a close frame (RFC 6455 section 7.4). */
export function isSendableCloseCode(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
    (code >= 3000 && code <= 4999);
}

const INITIAL_BUFFER_BYTES = 16 * 1024;
/** Payloads from this size on are handed over in the buffer they arrived in rather than copied. */
const HANDOVER_BYTES = 64 * 1024;

/** Incremental frame decoder for one direction of one connection. */
export class FrameDecoder {
  #buf = new Uint8Array(INITIAL_BUFFER_BYTES);
  #start = 0;
  #end = 0;
  #maxPayload: number;
  #expectMasked: boolean;

  /** `expectMasked`: true when decoding a client's frames (server role). */
  constructor(options: { maxPayload: number; expectMasked: boolean }) {
    this.#maxPayload = options.maxPayload;
    this.#expectMasked = options.expectMasked;
  }

  /** Bytes of buffer this decoder holds (at most one frame's worth plus the last push). */
  get capacity(): number {
    return this.#buf.length;
  }

  push(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    if (this.#end + bytes.length > this.#buf.length) {
      const live = this.#end - this.#start;
      const need = live + bytes.length;
      if (need <= this.#buf.length) {
        this.#buf.copyWithin(0, this.#start, this.#end);
      } else {
        // Doubling amortises small frames; a frame whose length is known gets exactly its size,
        // so one large frame never holds twice its length.
        const declared = this.#declaredFrameBytes();
        const size = declared > need
          ? declared
          : Math.max(need, Math.min(need * 2, declared || Infinity));
        const next = new Uint8Array(size);
        next.set(this.#buf.subarray(this.#start, this.#end), 0);
        this.#buf = next;
      }
      this.#start = 0;
      this.#end = live;
    }
    this.#buf.set(bytes, this.#end);
    this.#end += bytes.length;
  }

  /** The whole size of the frame at the front when its header is buffered and its length allowed, else 0. */
  #declaredFrameBytes(): number {
    const available = this.#end - this.#start;
    if (available < 2) return 0;
    const b1 = this.#buf[this.#start + 1] as number;
    let length = b1 & 0x7f;
    let header = 2;
    if (length === 126) {
      if (available < 4) return 0;
      length = ((this.#buf[this.#start + 2] as number) << 8) |
        (this.#buf[this.#start + 3] as number);
      header = 4;
    } else if (length === 127) {
      if (available < 10) return 0;
      const view = new DataView(this.#buf.buffer, this.#buf.byteOffset + this.#start + 2, 8);
      length = view.getUint32(0) * 2 ** 32 + view.getUint32(4);
      header = 10;
    }
    if (length > this.#maxPayload) return 0;
    return header + ((b1 & 0x80) !== 0 ? 4 : 0) + length;
  }

  /**
   * The next complete frame, or undefined when more bytes are needed.
   *
   * @throws {WsProtocolError}
   */
  next(): WsFrame | undefined {
    const available = this.#end - this.#start;
    if (available < 2) return undefined;
    const b0 = this.#buf[this.#start] as number;
    const b1 = this.#buf[this.#start + 1] as number;
    const fin = (b0 & 0x80) !== 0;
    if ((b0 & 0x70) !== 0) throw new WsProtocolError("Cannot accept frame: RSV bits set");
    const opcode = b0 & 0x0f;
    if (opcode > 2 && opcode < 8 || opcode > 10) {
      throw new WsProtocolError(`Cannot accept frame: opcode ${opcode}`);
    }
    const masked = (b1 & 0x80) !== 0;
    if (masked !== this.#expectMasked) {
      throw new WsProtocolError(
        masked ? "Cannot accept masked frame" : "Cannot accept unmasked frame",
      );
    }
    let length = b1 & 0x7f;
    let offset = 2;
    if (length === 126) {
      if (available < 4) return undefined;
      length = ((this.#buf[this.#start + 2] as number) << 8) |
        (this.#buf[this.#start + 3] as number);
      offset = 4;
    } else if (length === 127) {
      if (available < 10) return undefined;
      const view = new DataView(this.#buf.buffer, this.#buf.byteOffset + this.#start + 2, 8);
      const high = view.getUint32(0);
      if (high > 0x1fffff) throw new WsProtocolError("Cannot accept frame: length overflow", 1009);
      length = high * 2 ** 32 + view.getUint32(4);
      offset = 10;
    }
    if (opcode >= 8 && (length > 125 || !fin)) {
      throw new WsProtocolError("Cannot accept control frame: fragmented or over 125 bytes");
    }
    if (length > this.#maxPayload) {
      throw new WsProtocolError(`Cannot accept frame: over ${this.#maxPayload} bytes`, 1009);
    }
    const maskAt = this.#start + offset;
    if (masked) offset += 4;
    if (available < offset + length) return undefined;
    const key = masked ? this.#buf.slice(maskAt, maskAt + 4) : undefined;
    const payloadStart = this.#start + offset;
    const payloadEnd = payloadStart + length;
    let payload: Uint8Array;
    if (length >= HANDOVER_BYTES) {
      // A large payload keeps the buffer it arrived in (no copy); what follows it moves to a
      // fresh buffer.
      payload = this.#buf.subarray(payloadStart, payloadEnd);
      const rest = this.#buf.subarray(payloadEnd, this.#end);
      this.#buf = new Uint8Array(Math.max(INITIAL_BUFFER_BYTES, rest.length));
      this.#buf.set(rest, 0);
      this.#start = 0;
      this.#end = rest.length;
    } else {
      payload = this.#buf.slice(payloadStart, payloadEnd);
      this.#start += offset + length;
      if (this.#start === this.#end) this.#start = this.#end = 0;
    }
    if (key !== undefined) {
      for (let i = 0; i < length; i++) payload[i] = (payload[i] as number) ^ (key[i & 3] as number);
    }
    return { fin, opcode, payload };
  }
}

/** Joins fragmented data frames into messages and enforces the message size cap. */
export class MessageAssembler {
  #parts: Uint8Array[] = [];
  #size = 0;
  #opcode = -1;
  #maxMessage: number;

  constructor(maxMessage: number) {
    this.#maxMessage = maxMessage;
  }

  /**
   * Feeds a data frame (text, binary or continuation).
   *
   * @returns the complete message when this frame ends one.
   * @throws {WsProtocolError}
   */
  add(frame: WsFrame): { opcode: number; data: Uint8Array } | undefined {
    if (frame.opcode === OP_CONTINUATION) {
      if (this.#opcode === -1) {
        throw new WsProtocolError("Cannot accept continuation without a start");
      }
    } else if (this.#opcode !== -1) {
      throw new WsProtocolError("Cannot accept a new message inside a fragmented one");
    } else {
      this.#opcode = frame.opcode;
    }
    this.#size += frame.payload.length;
    if (this.#size > this.#maxMessage) {
      throw new WsProtocolError(`Cannot accept message: over ${this.#maxMessage} bytes`, 1009);
    }
    if (!frame.fin) {
      this.#parts.push(frame.payload);
      return undefined;
    }
    let data = frame.payload;
    if (this.#parts.length > 0) {
      this.#parts.push(frame.payload);
      data = new Uint8Array(this.#size);
      let at = 0;
      for (const part of this.#parts) {
        data.set(part, at);
        at += part.length;
      }
    }
    const opcode = this.#opcode;
    this.#parts = [];
    this.#size = 0;
    this.#opcode = -1;
    return { opcode, data };
  }
}
