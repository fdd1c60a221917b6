"""`oxygen serve`: the engine behind openpi's websocket wire (ROS-free).

wire.py             openpi's msgpack + numpy encoding
robot_inputs.py     openpi's LIBERO / DROID / ALOHA observation keys -> camera slots, state, prompt
policy_adapters.py  observation -> engine input, chunk -> actions (a checkpoint's policy I/O or as given)
sessions.py         one session per connection, batched into fleet frames on one engine thread
server.py           the websocket server: metadata, replies, errors, /healthz, the API key
"""
