// Who may talk to `megatron serve`. What it exposes: generation from the loaded model, its name
// and size; no file, no checkpoint, no shell. Two guards:
//   - bound to a loopback address (the default, 127.0.0.1), every request must name a loopback
//     host in Host (and in Origin, when a browser sends one): a web page elsewhere that points
//     its own domain at 127.0.0.1 (DNS rebinding) sends its domain there and is refused;
//   - with --api-key, every request but the page itself must carry "Authorization: Bearer KEY"
//     (OpenAI's scheme), compared in constant time.
#pragma once

#include <string>

#include "tasks/serve/http_server.h"

namespace megatron {

// "localhost", any 127.x.y.z, "::1" (bracketed or not).
bool is_loopback_host(const std::string& host);

// "" when Host (and Origin, if present) name a loopback host; else the reason for a 403.
std::string loopback_request_error(const HttpRequest& request);

// "" when the request carries "Authorization: Bearer <key>"; else the reason for a 401.
std::string api_key_error(const HttpRequest& request, const std::string& key);

}  // namespace megatron
