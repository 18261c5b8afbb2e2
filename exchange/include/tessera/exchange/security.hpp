// tessera/exchange/security.hpp: CurveZMQ on the host's, the tiles' and tessera-gpu's sockets.
//
// A key directory made once per cluster (`tessera-tile --make-keys DIR`) holds three key pairs:
// the host's (host.pub, host.key), the tiles' (tile.pub, tile.key) and the GPU baseline
// processes' (gpu.pub, gpu.key), plus authorized_keys (host.pub and tile.pub: the public keys the
// host's and the tiles' ZAP handlers admit). Server sockets (the host's control ROUTER, every
// tile's exchange PULL, tessera-gpu's ROUTER) authenticate clients with a ZAP handler; client
// sockets (tile DEALERs, exchange PUSHes, the host's DEALER to tessera-gpu) authenticate the
// server by its public key. tessera-gpu admits the host's key alone (a tile key cannot reach it,
// and gpu.pub is not in authorized_keys, so a GPU machine's key cannot register as a tile). A peer
// without the right key pair fails the handshake: it cannot register, send tensors or batches or
// read them, and traffic is encrypted.
//
// What each machine needs: the host host.*, tile.pub and gpu.pub (gpu.key too when it spawns
// tessera-gpu itself); a tile tile.*, host.pub and authorized_keys; a GPU machine gpu.* and
// host.pub.
//
//   auto made = make_keys("/etc/tessera/keys");              // once, by the operator or launcher
//   auto sec = load_security("/etc/tessera/keys", security_role::tile);  // each process
//   set_process_security(*sec);                              // before sockets are created
//   secure_server(ctx, pull);  pull.bind(...);               // where sockets are created
//   secure_client(push);       push.connect(...);
#pragma once

#include <string>
#include <vector>
#include <zmq.hpp>

#include "tessera/common/status.hpp"

namespace tessera::exchange {

/// A CurveZMQ key pair in Z85 text (40 characters each).
struct curve_keypair {
  std::string public_key;
  std::string secret_key;
};

enum class security_role { host, tile, gpu };

struct security_config {
  bool curve = false;                    ///< false: plain (NULL mechanism) sockets
  curve_keypair self;                    ///< this process's pair (host's or tile's)
  curve_keypair tile;                    ///< the tiles' pair (server key of exchange PULLs)
  std::string host_public;               ///< server key of the host's ROUTER
  std::string gpu_public;                ///< server key of tessera-gpu's ROUTER (host: empty without gpu.pub)
  std::vector<std::string> authorized;   ///< public keys the ZAP handler admits
  std::string dir;                       ///< the key directory (passed on to processes a host spawns)
};

/// A fresh key pair (zmq_curve_keypair). Fails when libzmq lacks CURVE.
result<curve_keypair> make_keypair();
/// Writes host.pub/host.key, tile.pub/tile.key, gpu.pub/gpu.key and authorized_keys into `dir`
/// (created, 0700; secrets 0600); returns the names written. A directory made before the GPU pair
/// existed (host and tile pairs, no gpu.key) gets the GPU pair alone. Never overwrites a key.
result<std::vector<std::string>> make_keys(const std::string& dir);
/// Reads what `role` needs from `dir`: the host reads host.*, tile.pub, authorized_keys and
/// gpu.pub if present; a tile reads tile.*, host.pub, authorized_keys; tessera-gpu reads gpu.*
/// and host.pub, and admits host.pub alone.
result<security_config> load_security(const std::string& dir, security_role role);

/// The configuration every later secure_server/secure_client call uses (default: plain).
void set_process_security(const security_config& cfg);
const security_config& process_security();

/// Makes `s` a CURVE server (if enabled) and starts `ctx`'s ZAP handler, which admits only the
/// authorized public keys. Call before bind.
void secure_server(zmq::context_t& ctx, zmq::socket_t& s);
/// Makes `s` a CURVE client of a tessera server (if enabled); `server_public` empty = the host's
/// key for DEALERs, see secure_exchange_client. Call before connect.
void secure_client(zmq::socket_t& s, const std::string& server_public);
/// Client of the host's control ROUTER.
inline void secure_host_client(zmq::socket_t& s) { secure_client(s, process_security().host_public); }
/// Client of a tile's exchange PULL.
inline void secure_exchange_client(zmq::socket_t& s) { secure_client(s, process_security().tile.public_key); }
/// Client of tessera-gpu's ROUTER (the host's remote_backend).
inline void secure_gpu_client(zmq::socket_t& s) { secure_client(s, process_security().gpu_public); }

/// True when `endpoint` stays on this machine (ipc://, inproc://, tcp://127.x, localhost, [::1]).
bool is_loopback_endpoint(const std::string& endpoint);
/// ZAP requests denied so far in this process (for tests and metrics).
uint64_t zap_denied();

}  // namespace tessera::exchange
