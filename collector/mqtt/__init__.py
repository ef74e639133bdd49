"""Burst and link events over MQTT: settings, rate policy, spool, publisher, and attach_mqtt."""

from burstscope.collector.mqtt.attach import MqttHandle, attach_mqtt
from burstscope.collector.mqtt.settings import (
    MqttSettings,
    MqttSettingsError,
    add_connection_arguments,
    add_mqtt_arguments,
    build_settings,
    mqtt_settings_from_args,
)

__all__ = [
    "MqttHandle",
    "MqttSettings",
    "MqttSettingsError",
    "add_connection_arguments",
    "add_mqtt_arguments",
    "attach_mqtt",
    "build_settings",
    "mqtt_settings_from_args",
]
